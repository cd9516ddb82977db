// A sparse workload on the server engine: word embeddings learnt by skip-gram with negative
// sampling (word2vec) over a text corpus (Debian's licence texts, as the RNN uses). The input
// and output tables ([vocab, dim] each) are split by row over the server shards; each trainer
// walks its share of the corpus, pulls only the rows a batch touches (centres; contexts and
// negatives), computes the loss and its gradients locally and pushes those rows back, with the
// servers' per-row optimizer (Adagrad by default) and `async` consistency. Trainer 0 prints
// progress, writes OUT_DIR/metrics.csv, learning_curve.png, neighbours.txt (nearest words by
// cosine similarity of a few words), ps_stats.csv and config.yaml.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "training/ps/ps_config.h"
#include "training/ps/server.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

// The corpus as word ids over its `vocab` most frequent words seen at least min_count times
// (lower-cased letter runs); other words are dropped. Same on every trainer.
struct WordCorpus {
  std::vector<std::string> words;  // id -> word, most frequent first
  std::vector<std::int64_t> counts;
  at::Tensor ids;                                  // int64 [tokens]
  std::int64_t id_of(const std::string& w) const;  // -1 when not in the vocabulary
};
WordCorpus load_word_corpus(const std::string& path, int vocab, int min_count);

// The `k` nearest words of `word` by cosine similarity of the rows of table (excluding itself).
std::vector<std::pair<std::string, double>> nearest(const WordCorpus& c, const at::Tensor& table,
                                                    const std::string& word, int k);

// Servers serve (serve_shard); trainers train.
void run_skipgram(const SkipgramConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                  const std::shared_ptr<ShardServer>& server);

}  // namespace distrl::training::ps
