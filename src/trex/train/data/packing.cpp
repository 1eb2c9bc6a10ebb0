#include "trex/train/data/packing.hpp"

#include <algorithm>
#include <numeric>

#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/chat.hpp"

namespace trex::train {

namespace {

constexpr uint64_t kShuffleStream = 0x5348554646ULL;  // "SHUFF"

uint64_t parse_u64(const nlohmann::json& value, const char* key, const std::string& origin) {
  if (!value.contains(key)) throw Error("loader state: missing field").file(origin).field(key);
  const nlohmann::json& v = value[key];
  try {
    if (v.is_string()) {
      size_t used = 0;
      const std::string& s = v.get_ref<const std::string&>();
      const uint64_t x = std::stoull(s, &used);
      if (used != s.size() || s.empty() || s[0] == '-') throw std::invalid_argument(s);
      return x;
    }
    if (v.is_number_unsigned()) return v.get<uint64_t>();
  } catch (const std::exception&) {
  }
  throw Error("loader state: expected an unsigned integer (or its decimal string)")
      .file(origin)
      .field(key);
}

}  // namespace

nlohmann::json LoaderState::to_json() const {
  return {{"seed", std::to_string(seed)},
          {"epoch", epoch},
          {"cursor", cursor},
          {"data_fingerprint", std::to_string(data_fingerprint)}};
}

LoaderState LoaderState::from_json(const nlohmann::json& value, const std::string& origin) {
  if (!value.is_object()) throw Error("loader state must be a JSON object").file(origin);
  LoaderState state;
  state.seed = parse_u64(value, "seed", origin);
  state.data_fingerprint = parse_u64(value, "data_fingerprint", origin);
  for (const char* key : {"epoch", "cursor"}) {
    if (!value.contains(key) || !value[key].is_number_integer() || value[key].get<int64_t>() < 0)
      throw Error("loader state: expected a non-negative integer").file(origin).field(key);
  }
  state.epoch = value["epoch"].get<int64_t>();
  state.cursor = value["cursor"].get<int64_t>();
  return state;
}

PackingLoader::PackingLoader(PackingItems items, PackingOptions options)
    : items_(std::move(items)), options_(options) {
  if (options_.seq_len < 2) throw Error("sequence length must be >= 2").field("seq_len");
  if (options_.batch_size < 1) throw Error("batch size must be >= 1").field("batch_size");
  if (items_.count() < 1 || items_.offsets.front() != 0 ||
      items_.offsets.back() != static_cast<int64_t>(items_.tokens.size()) ||
      items_.labels.size() != items_.tokens.size())
    throw Error("loader needs at least one item with matching tokens and labels");
  for (int64_t i = 0; i < items_.count(); ++i) {
    const int64_t length = items_.offsets[i + 1] - items_.offsets[i];
    if (length < 1) throw Error("loader item " + std::to_string(i) + " is empty");
    if (options_.mode == PackingMode::kWholeItems && length > options_.seq_len)
      throw Error("loader item " + std::to_string(i) + " is longer than the sequence length");
  }
  uint64_t h = hash_string("trex-packing-v1");
  h = hash_combine(h, static_cast<uint64_t>(options_.seq_len));
  h = hash_combine(h, options_.shuffle ? 1 : 0);
  h = hash_combine(h, static_cast<uint64_t>(options_.mode));
  h = hash_combine(h, static_cast<uint64_t>(static_cast<uint32_t>(options_.pad_id)));
  for (int64_t o : items_.offsets) h = hash_combine(h, static_cast<uint64_t>(o));
  for (size_t i = 0; i < items_.tokens.size(); ++i)
    h = hash_combine(h, (static_cast<uint64_t>(static_cast<uint32_t>(items_.tokens[i])) << 32) |
                            static_cast<uint32_t>(items_.labels[i]));
  state_.seed = options_.seed;
  state_.data_fingerprint = h;
}

void PackingLoader::build_epoch(int64_t epoch) {
  if (built_epoch_ == epoch) return;
  std::vector<int64_t> order(static_cast<size_t>(items_.count()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    Rng rng(options_.seed, {kShuffleStream, static_cast<uint64_t>(epoch)});
    rng.shuffle(order);
  }
  const int64_t S = options_.seq_len;
  sequences_.clear();
  std::vector<Segment> current;
  int64_t used = 0;
  auto close_sequence = [&] {
    if (used < S) current.push_back({-1, 0, S - used});
    sequences_.push_back(std::move(current));
    current.clear();
    used = 0;
  };
  for (int64_t item : order) {
    const int64_t begin = items_.offsets[item];
    const int64_t length = items_.offsets[item + 1] - begin;
    if (options_.mode == PackingMode::kWholeItems) {
      if (used + length > S) close_sequence();
      current.push_back({item, 0, length});
      used += length;
      if (used == S) close_sequence();
      continue;
    }
    for (int64_t done = 0; done < length;) {
      const int64_t take = std::min(length - done, S - used);
      current.push_back({item, done, take});
      used += take;
      done += take;
      if (used == S) close_sequence();
    }
  }
  if (used > 0) close_sequence();
  built_epoch_ = epoch;
}

int64_t PackingLoader::sequences_in_epoch() {
  build_epoch(state_.epoch);
  return static_cast<int64_t>(sequences_.size());
}

void PackingLoader::write_sequence(const std::vector<Segment>& sequence, int64_t row,
                                   PackedBatch& out) const {
  const int64_t S = options_.seq_len;
  int64_t t = row * S;
  int64_t document = 0;
  for (const Segment& segment : sequence) {
    for (int64_t k = 0; k < segment.length; ++k, ++t) {
      if (segment.item < 0) {
        out.batch.input_ids[t] = options_.pad_id;
        out.batch.labels[t] = io::kIgnoredLabel;
      } else {
        const int64_t at = items_.offsets[segment.item] + segment.begin + k;
        out.batch.input_ids[t] = items_.tokens[at];
        // Nothing predicts a segment's first token from inside its own document.
        out.batch.labels[t] = k == 0 ? io::kIgnoredLabel : items_.labels[at];
      }
      out.position_ids[t] = k;
      out.document_ids[t] = document;
    }
    ++document;
  }
}

PackedBatch PackingLoader::next_batch() {
  const int64_t B = options_.batch_size;
  const int64_t S = options_.seq_len;
  PackedBatch out;
  out.batch.B = B;
  out.batch.S = S;
  out.batch.input_ids.assign(static_cast<size_t>(B * S), 0);
  out.batch.labels.assign(static_cast<size_t>(B * S), io::kIgnoredLabel);
  out.position_ids.assign(static_cast<size_t>(B * S), 0);
  out.document_ids.assign(static_cast<size_t>(B * S), 0);
  for (int64_t row = 0; row < B; ++row) {
    build_epoch(state_.epoch);
    if (state_.cursor >= static_cast<int64_t>(sequences_.size())) {
      ++state_.epoch;
      state_.cursor = 0;
      build_epoch(state_.epoch);
    }
    write_sequence(sequences_[static_cast<size_t>(state_.cursor)], row, out);
    ++state_.cursor;
  }
  return out;
}

void PackingLoader::restore(const LoaderState& state) {
  if (state.seed != options_.seed)
    throw Error("loader state has seed " + std::to_string(state.seed) + ", this loader " +
                std::to_string(options_.seed))
        .field("seed");
  if (state.data_fingerprint != state_.data_fingerprint)
    throw Error("loader state was saved for other data or packing options")
        .field("data_fingerprint");
  if (state.epoch < 0 || state.cursor < 0) throw Error("loader state: negative position");
  build_epoch(state.epoch);
  if (state.cursor > static_cast<int64_t>(sequences_.size()))
    throw Error("loader state: cursor " + std::to_string(state.cursor) + " beyond the " +
                std::to_string(sequences_.size()) + " sequences of epoch " +
                std::to_string(state.epoch))
        .field("cursor");
  state_ = state;
}

}  // namespace trex::train
