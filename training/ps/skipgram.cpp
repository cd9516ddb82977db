#include "training/ps/skipgram.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "common/error.h"
#include "models/checkpoint.h"
#include "training/data.h"
#include "training/ps/batch_update.h"
#include "training/ps/client.h"
#include "training/run_loop.h"
#include "transport/bootstrap/store.h"

namespace distrl::training::ps {

namespace {
constexpr const char* kIn = "skipgram.in";    // the word vectors (what neighbours are read from)
constexpr const char* kOut = "skipgram.out";  // the context vectors
std::string finished_key(int trainer) { return "ps/skipgram/finished/" + std::to_string(trainer); }
}  // namespace

std::int64_t WordCorpus::id_of(const std::string& w) const {
  auto it = std::find(words.begin(), words.end(), w);
  return it == words.end() ? -1 : it - words.begin();
}

WordCorpus load_word_corpus(const std::string& path, int vocab, int min_count) {
  const std::string text = read_text(path);
  std::vector<std::string> tokens;
  std::string w;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalpha(c)) {
      w += static_cast<char>(std::tolower(c));
    } else if (!w.empty()) {
      tokens.push_back(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) tokens.push_back(w);
  std::unordered_map<std::string, std::int64_t> count;
  for (const auto& t : tokens) ++count[t];
  std::vector<std::pair<std::string, std::int64_t>> byfreq(count.begin(), count.end());
  std::sort(byfreq.begin(), byfreq.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;  // ties by name: same everywhere
  });
  WordCorpus c;
  std::unordered_map<std::string, std::int64_t> id;
  for (const auto& [word, n] : byfreq) {
    if (static_cast<int>(c.words.size()) >= vocab || n < min_count) break;
    id[word] = static_cast<std::int64_t>(c.words.size());
    c.words.push_back(word);
    c.counts.push_back(n);
  }
  std::vector<std::int64_t> ids;
  for (const auto& t : tokens)
    if (auto it = id.find(t); it != id.end()) ids.push_back(it->second);
  if (c.words.size() < 10 || ids.size() < 1000)
    throw ConfigError("data: " + std::to_string(c.words.size()) +
                      " words of at least data.min_count=" + std::to_string(min_count) + " occurrences in '" + path +
                      "' are too few for skip-gram; point data.path at more text or lower data.min_count");
  c.ids = torch::tensor(ids, torch::kLong);
  return c;
}

std::vector<std::pair<std::string, double>> nearest(const WordCorpus& c, const at::Tensor& table,
                                                    const std::string& word, int k) {
  const std::int64_t id = c.id_of(word);
  if (id < 0) return {};
  torch::NoGradGuard no_grad;
  const at::Tensor unit = table / table.norm(2, 1, true).clamp_min(1e-8);
  at::Tensor sims = unit.matmul(unit[id]);
  sims[id] = -2;  // not itself
  auto top = sims.topk(std::min<std::int64_t>(k, sims.size(0) - 1));
  std::vector<std::pair<std::string, double>> out;
  for (std::int64_t i = 0; i < std::get<1>(top).size(0); ++i)
    out.emplace_back(c.words[std::get<1>(top)[i].item<std::int64_t>()], std::get<0>(top)[i].item<double>());
  return out;
}

namespace {

// Trainer 0 waits (bounded by their deaths) until every other trainer has pushed its last step,
// so the neighbours it reads come from the finished tables.
void wait_for_other_trainers(const PsCommon& cfg, transport::RpcAgent& agent) {
  for (int t = 1; t < cfg.trainers; ++t) {
    const int rank = cfg.servers + t;
    agent.watch(rank);
    while (!agent.store().check({finished_key(t)}) && !agent.connection_lost(rank))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Each of report.words with its 5 nearest words by the finished table, printed and written to
// run.out_dir/neighbours.txt.
void write_neighbours(const SkipgramConfig& cfg, const WordCorpus& corpus, const at::Tensor& table) {
  std::ofstream out(cfg.out_dir + "/neighbours.txt");
  std::istringstream list(cfg.words);
  for (std::string word; std::getline(list, word, ',');) {
    word.erase(std::remove_if(word.begin(), word.end(), [](unsigned char ch) { return std::isspace(ch); }), word.end());
    if (word.empty()) continue;
    std::ostringstream line;
    line << "  " << word << ":";
    const auto near = nearest(corpus, table, word, 5);
    if (near.empty()) line << " (not in the vocabulary)";
    for (const auto& [w, sim] : near) line << " " << w << " (" << std::fixed << std::setprecision(2) << sim << ")";
    std::cout << line.str() << std::endl;
    out << line.str() << "\n";
  }
}

}  // namespace

void run_skipgram(const SkipgramConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                  const std::shared_ptr<ShardServer>& server) {
  if (serve_if_server(cfg, agent, server)) return;

  const int trainer = agent.rank() - cfg.servers;
  const bool lead = trainer == 0;
  const WordCorpus corpus = load_word_corpus(cfg.data_path, cfg.vocab, cfg.min_count);
  const std::int64_t V = static_cast<std::int64_t>(corpus.words.size()), D = cfg.embedding_dim;
  const std::int64_t n = corpus.ids.size(0);
  const std::int64_t lo = n * trainer / cfg.trainers, hi = n * (trainer + 1) / cfg.trainers;  // this trainer's share

  torch::manual_seed(cfg.seed);  // the same initial tables on every trainer (the first declaration wins)
  PsClient ps(agent, client_options(cfg, trainer));
  ps.declare_table(kIn, (torch::rand({V, D}) - 0.5) / static_cast<double>(D));
  ps.declare_table(kOut, torch::zeros({V, D}));

  // Negatives from the unigram distribution to the 3/4 (word2vec's).
  const at::Tensor noise = torch::tensor(corpus.counts, torch::kDouble).pow(0.75);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(cfg.seed) * 7919ull + trainer + 1);
  const std::int64_t B = cfg.batch_size, K = cfg.negatives;

  RunLoop loop(cfg, "distrl-ps", lead);
  loop.stop_through(agent.store());  // SIGINT/SIGTERM: every trainer stops after its current step
  loop.open(config_yaml, "metrics.csv", "step,loss,pairs_per_s");
  if (lead)
    std::cout << "trainer 0: skip-gram over " << n << " words (" << V << " in the vocabulary) from " << cfg.data_path
              << "; tables " << V << " x " << D << " on " << cfg.servers << " shard(s), " << cfg.trainers
              << " trainer(s), " << cfg.steps << " steps of " << B << " pairs, " << K << " negatives each" << std::endl;
  Window w;  // the steps since the last progress line
  double first_loss = -1, last_loss = 0;
  int steps = 0;
  for (int step = 1; step <= cfg.steps && !loop.stop_requested(); ++step) {
    steps = step;
    // A batch of (centre, context) pairs from this trainer's share, and K negatives per pair.
    const at::Tensor pos = torch::randint(lo, hi, {B}, gen, torch::kLong);
    at::Tensor off = torch::randint(1, cfg.window + 1, {B}, gen, torch::kLong);
    off = torch::where(torch::rand({B}, gen) < 0.5, off, -off);
    const at::Tensor ctx_pos = (pos + off).clamp(0, n - 1);
    const at::Tensor centre = corpus.ids.index_select(0, pos), context = corpus.ids.index_select(0, ctx_pos);
    const at::Tensor negative = torch::multinomial(noise, B * K, /*replacement=*/true, gen);
    // Only the rows the batch touches travel, each once.
    at::Tensor in_rows, in_inv, out_rows, out_inv;
    std::tie(in_rows, in_inv, std::ignore) = at::_unique2(centre, true, true);
    std::tie(out_rows, out_inv, std::ignore) = at::_unique2(torch::cat({context, negative}), true, true);
    at::Tensor vin = ps.pull_rows(kIn, in_rows).requires_grad_(true);
    at::Tensor vout = ps.pull_rows(kOut, out_rows).requires_grad_(true);
    const at::Tensor c = vin.index_select(0, in_inv);                                // [B, D]
    const at::Tensor p = vout.index_select(0, out_inv.slice(0, 0, B));               // [B, D]
    const at::Tensor q = vout.index_select(0, out_inv.slice(0, B)).view({B, K, D});  // [B, K, D]
    const at::Tensor positive = torch::log_sigmoid((c * p).sum(1));
    const at::Tensor negatives = torch::log_sigmoid(-torch::bmm(q, c.unsqueeze(2)).squeeze(2)).sum(1);
    const at::Tensor loss = -(positive + negatives).mean();
    loss.backward();
    ps.push_rows(kIn, in_rows, vin.grad());
    ps.push_rows(kOut, out_rows, vout.grad());

    w.add(loss.item<double>(), B);
    if (loop.log_due(step) || (lead && (step == cfg.steps || loop.stop_requested()))) {
      const double rate = w.items_per_s();
      if (first_loss < 0) first_loss = w.mean_loss();
      last_loss = w.mean_loss();
      loop.row(step, last_loss, rate);
      std::cout << "step " << std::setw(6) << step << "/" << cfg.steps << "  loss " << std::fixed
                << std::setprecision(4) << last_loss << "  " << std::setprecision(0) << rate << " pairs/s"
                << std::defaultfloat << std::endl;
      w.reset();
    }
  }
  agent.store().set(finished_key(trainer), "1");
  if (lead) {
    wait_for_other_trainers(cfg, agent);
    const double seconds = loop.seconds();
    const at::Tensor table = ps.pull_rows(kIn, torch::arange(V));
    if (loop.stop_requested()) loop.report_stop("step", steps, cfg.steps);
    std::cout << "trainer 0: loss " << std::setprecision(4) << first_loss << " -> " << last_loss << " in " << steps
              << " steps (" << std::setprecision(3) << seconds << " s); nearest words:" << std::endl;
    write_neighbours(cfg, corpus, table);
    models::save_file(table, cfg.out_dir + "/embeddings.pt");
    write_stats_csv(cfg.out_dir + "/ps_stats.csv", ps.stats());
    loop.finish({{"skip-gram loss", "step", {{"step", "loss", "loss"}}}});
    std::cout << "trainer 0: wrote " << cfg.out_dir
              << "/{metrics.csv,learning_curve.png,neighbours.txt,embeddings.pt,ps_stats.csv,config.yaml}" << std::endl;
  }
  ps.bye();
}

}  // namespace distrl::training::ps
