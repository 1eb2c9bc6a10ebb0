#include "trex/train/data/source.hpp"

#include <utility>

#include "trex/model/flops.hpp"

namespace trex::train {
namespace {

// Document lengths of a packed batch (runs of equal document ids per row; the
// padding tail is a segment of its own and is computed like any other).
model::SequenceStats sequence_stats(const model::Batch& b) {
  std::vector<int64_t> lengths;
  for (int64_t row = 0; row < b.B; ++row) {
    int64_t run = 0;
    for (int64_t t = 0; t < b.S; ++t) {
      const size_t i = static_cast<size_t>(row * b.S + t);
      if (t > 0 && !b.document_ids.empty() && b.document_ids[i] != b.document_ids[i - 1]) {
        lengths.push_back(run);
        run = 0;
      }
      ++run;
    }
    lengths.push_back(run);
  }
  return model::SequenceStats::from_lengths(lengths);
}

}  // namespace

DataSource::DataSource(const RunConfig& c, const io::Tokenizer& tokenizer, const std::string& file,
                       bool shuffle) {
  if (c.mode == DataMode::kCpt) {
    cpt_.emplace(CptLoader::from_jsonl(file, tokenizer,
                                       {.seq_len = c.seq_len,
                                        .batch_size = c.micro_batch,
                                        .seed = c.data_seed,
                                        .shuffle = shuffle},
                                       c.data_strict));
  } else {
    SftLoaderOptions o;
    o.seq_len = c.seq_len;
    o.batch_size = c.micro_batch;
    o.seed = c.data_seed;
    o.shuffle = shuffle;
    sft_.emplace(SftLoader::from_jsonl(file, tokenizer, o, c.data_strict));
  }
}

model::Batch to_model_batch(PackedBatch packed) {
  model::Batch b = std::move(packed.batch);
  b.position_ids = std::move(packed.position_ids);
  b.document_ids = std::move(packed.document_ids);
  return b;
}

StepBatches read_step_batches(DataSource& data, size_t count, const model::ModelConfig& config,
                              int64_t mtp_layers) {
  std::vector<model::Batch> micro_batches;
  for (size_t i = 0; i < count; ++i) micro_batches.push_back(to_model_batch(data.next_batch()));
  return step_batches_of(std::move(micro_batches), config, mtp_layers);
}

StepBatches step_batches_of(std::vector<model::Batch> micro_batches,
                            const model::ModelConfig& config, int64_t mtp_layers) {
  StepBatches step;
  step.micro_batches = std::move(micro_batches);
  for (const model::Batch& b : step.micro_batches) {
    step.tokens += b.B * b.S;
    step.flops += model::training_step_flops(config, sequence_stats(b), mtp_layers);
  }
  return step;
}

int64_t count_trained_tokens(const model::Batch& b) {
  const std::vector<int64_t>& labels = b.labels.empty() ? b.input_ids : b.labels;
  const bool has_doc = !b.document_ids.empty(), has_pos = !b.position_ids.empty();
  int64_t count = 0;
  for (int64_t row = 0; row < b.B; ++row)
    for (int64_t t = 0; t + 1 < b.S; ++t) {
      const size_t next = static_cast<size_t>(row * b.S + t + 1);
      const bool boundary = has_doc   ? b.document_ids[next] != b.document_ids[next - 1]
                            : has_pos ? b.position_ids[next] == 0
                                      : false;
      if (!boundary && labels[next] >= 0) ++count;
    }
  return count;
}

}  // namespace trex::train
