#include "transport/wire/detail/wire_codec.h"

#include <cstdlib>
#include <cstring>
#include <memory>

namespace distrl::transport::detail {
namespace {

constexpr std::size_t kCopyBelowBytes = 1024;  // a heap-held owner reference costs more than a copy

const msgpack::object* find_key(const msgpack::object& map, const char* key) {
  const std::size_t n = std::strlen(key);
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && kv.key.via.str.size == n && !std::memcmp(kv.key.via.str.ptr, key, n))
      return &kv.val;
  }
  return nullptr;
}

template <typename T>
bool read_uint(const msgpack::object* o, T* out) {
  if (!o || o->type != msgpack::type::POSITIVE_INTEGER) return false;
  if (o->via.u64 > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(o->via.u64);
  return true;
}

bool read_int(const msgpack::object* o, std::int64_t* out) {
  if (!o) return false;
  if (o->type == msgpack::type::POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    *out = static_cast<std::int64_t>(o->via.u64);
  else if (o->type == msgpack::type::NEGATIVE_INTEGER) *out = o->via.i64;
  else return false;
  return true;
}

// Checks every tensor descriptor in the body against the frames before anything uses them.
void validate_tensors(const msgpack::object& o, const InFrames& in) {
  switch (o.type) {
    case msgpack::type::ARRAY:
      for (std::uint32_t i = 0; i < o.via.array.size; ++i) validate_tensors(o.via.array.ptr[i], in);
      break;
    case msgpack::type::MAP:
      for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        validate_tensors(o.via.map.ptr[i].key, in);
        validate_tensors(o.via.map.ptr[i].val, in);
      }
      break;
    case msgpack::type::EXT:
      if (o.via.ext.type() == kTensorExt) tensor_frame(in, parse_tensor_descriptor(o.via.ext.data(), o.via.ext.size));
      break;
    default: break;
  }
}

}  // namespace

std::optional<InMessage> decode_message(Frames&& frames, const WireLimits& limits, DecodeFailure* failure) {
  auto fail = [&](std::string what) -> std::optional<InMessage> {
    failure->what = std::move(what);
    return std::nullopt;
  };
  if (frames.empty()) return fail("empty message");
  std::size_t total = 0;
  for (auto& f : frames) total += f.size();
  if (frames.size() - 1 > limits.max_frames)
    return fail("message has " + std::to_string(frames.size() - 1) + " tensor frames, limit is " +
                std::to_string(limits.max_frames));

  InMessage m;
  m.wire_bytes = total;
  try {
    std::size_t off = 0;
    msgpack::unpack_limit lim(limits.max_array, limits.max_map, limits.max_str, limits.max_bin, 4096, limits.max_depth);
    m.handle =
        msgpack::unpack(static_cast<const char*>(frames[0].data()), frames[0].size(), off, nullptr, nullptr, lim);
    if (off != frames[0].size())
      return fail("header has " + std::to_string(frames[0].size() - off) + " trailing bytes");
  } catch (const std::exception& e) {
    return fail(std::string("header is not valid msgpack (") + e.what() + ")");
  }
  const msgpack::object& root = m.handle.get();
  if (root.type != msgpack::type::MAP) return fail("header is a msgpack " + msgpack_type_name(root) + ", not a map");

  // The reply address first, so every later failure can be answered.
  Header& h = m.header;
  std::int64_t src = -1;
  if (read_int(find_key(root, "src"), &src) && src >= -1 && src < (1 << 30))
    failure->src = h.src = static_cast<std::int32_t>(src);
  std::uint8_t kind = 255;
  const bool kind_ok = read_uint(find_key(root, "k"), &kind) && kind < kKindCount;
  if (kind_ok) failure->kind = h.kind = static_cast<Kind>(kind);
  if (read_uint(find_key(root, "id"), &h.call_id) && h.call_id != 0 && kind_ok) failure->call_id = h.call_id;

  if (!read_uint(find_key(root, "v"), &h.version)) return fail("header has no protocol version \"v\"");
  if (h.version != kProtocolVersion)
    return fail("unsupported protocol version " + std::to_string(h.version) + " (this build speaks " +
                std::to_string(kProtocolVersion) + ")");
  if (!kind_ok) return fail("header has a missing or unknown message kind \"k\"");
  if (total > limits.max_message_bytes)
    return fail("message of " + std::to_string(total) + " bytes exceeds the limit of " +
                std::to_string(limits.max_message_bytes) + " bytes");
  if (const auto* fn = find_key(root, "fn")) {
    if (fn->type != msgpack::type::STR) return fail("header field \"fn\" is not a string");
    h.fn.assign(fn->via.str.ptr, fn->via.str.size);
  }
  if (const auto* o = find_key(root, "obj"); o && !read_uint(o, &h.obj))
    return fail("header field \"obj\" is not an id");
  if (const auto* o = find_key(root, "new"); o && !read_uint(o, &h.new_obj))
    return fail("header field \"new\" is not an id");
  if (const auto* o = find_key(root, "ctx"); o && !read_int(o, &h.ctx))
    return fail("header field \"ctx\" is not an int");
  std::uint32_t nt = 0;
  if (!read_uint(find_key(root, "nt"), &nt)) return fail("header has no tensor frame count \"nt\"");
  if (nt != frames.size() - 1)
    return fail("header announces " + std::to_string(nt) + " tensor frames, message has " +
                std::to_string(frames.size() - 1));
  if (const auto* o = find_key(root, "am"); o && !read_int(o, &h.am)) return fail("header field \"am\" is not an int");
  if (const auto* o = find_key(root, "rg")) {
    if (o->type != msgpack::type::ARRAY || o->via.array.size > nt)
      return fail("header field \"rg\" is not an array of at most " + std::to_string(nt) + " frame numbers");
    for (std::uint32_t i = 0; i < o->via.array.size; ++i) {
      std::uint32_t f = 0;
      if (!read_uint(&o->via.array.ptr[i], &f) || f < 1 || f > nt || (!h.rg.empty() && f <= h.rg.back()))
        return fail("header field \"rg\" must list tensor frames 1.." + std::to_string(nt) + " in increasing order");
      h.rg.push_back(f);
    }
  }
  if (!h.rg.empty() && (h.ctx < 0 || h.am < 0))
    return fail("header lists frames that require grad (\"rg\") without a context and message id");
  if (const auto* a = find_key(root, "a")) m.body_object = *a;
  auto in = std::make_shared<InFrames>();
  in->frames.reserve(frames.size() - 1);
  for (std::size_t i = 1; i < frames.size(); ++i) in->frames.push_back(std::move(frames[i]));
  try {
    validate_tensors(m.body_object, *in);
  } catch (const ProtocolError& e) {
    return fail(e.what());
  }
  m.frames = std::move(in);
  return m;
}

const Frame& tensor_frame(const InFrames& in, const TensorDesc& d) {
  if (d.frame >= in.frames.size())
    throw ProtocolError("tensor descriptor names frame " + std::to_string(d.frame + 1) + ", message has " +
                        std::to_string(in.frames.size() + 1) + " frames");
  const Frame& f = in.frames[d.frame];
  if (f.size() != d.nbytes)
    throw ProtocolError("tensor frame " + std::to_string(d.frame + 1) + " has " + std::to_string(f.size()) +
                        " bytes, descriptor says " + std::to_string(d.nbytes));
  return f;
}

Frames encode_message(OutMessage&& m) {
  Frames out;
  out.reserve(1 + m.frames.size());
  const std::size_t hsize = m.header.size();
  if (hsize <= Frame::kInline) {
    out.emplace_back(m.header.data(), hsize);  // inline: no block, the buffer goes with m
  } else {
    std::unique_ptr<char, void (*)(void*)> header(m.header.release(), std::free);  // malloc'd by sbuffer
    const char* hdata = header.get();
    out.push_back(Frame::sharing(hdata, hsize, std::move(header)));
  }
  for (auto& f : m.frames) {
    const std::size_t n = f.size;
    if (n == 0) out.emplace_back();
    else if (n < kCopyBelowBytes || !f.owner) out.emplace_back(f.data, n);
    else out.push_back(Frame::sharing(f.data, n, std::move(f.owner)));
  }
  return out;
}

}  // namespace distrl::transport::detail
