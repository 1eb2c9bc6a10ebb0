#include "trex/train/data/cpt.hpp"

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/train/data/sft.hpp"

namespace trex::train {

namespace {

PackingItems documents_to_items(const std::vector<std::vector<int32_t>>& documents) {
  PackingItems items;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (documents[i].empty()) throw Error("CPT document " + std::to_string(i) + " is empty");
    items.tokens.insert(items.tokens.end(), documents[i].begin(), documents[i].end());
    items.labels.insert(items.labels.end(), documents[i].begin(), documents[i].end());
    items.offsets.push_back(static_cast<int64_t>(items.tokens.size()));
  }
  if (items.count() == 0) throw Error("CPT loader: no documents");
  return items;
}

PackingOptions packing_options(const CptLoaderOptions& options, int32_t pad_id) {
  PackingOptions p;
  p.seq_len = options.seq_len;
  p.batch_size = options.batch_size;
  p.seed = options.seed;
  p.shuffle = options.shuffle;
  p.pad_id = pad_id;
  p.mode = PackingMode::kContinuous;
  return p;
}

int64_t total_tokens(const std::vector<std::vector<int32_t>>& documents) {
  int64_t n = 0;
  for (const auto& d : documents) n += static_cast<int64_t>(d.size());
  return n;
}

}  // namespace

std::vector<std::vector<int32_t>> tokenize_text_jsonl(const std::string& path,
                                                      const io::Tokenizer& tokenizer,
                                                      const JsonlOptions& read, JsonlStats* stats) {
  const io::SpecialTokenIds& special = tokenizer.special_ids();
  if (special.bos < 0 || special.eos < 0)
    throw Error("the tokenizer has no BOS/EOS token; CPT documents need both").file(path);
  std::vector<std::vector<int32_t>> documents;
  JsonlStats input = read_jsonl(path, read, [&](const json& record, long line) {
    if (!record.is_object() || !record.contains("text") || !record["text"].is_string())
      throw Error("expected an object with a string \"text\"").file(path).line(line).field("text");
    std::vector<int32_t> doc = {special.bos};
    const std::vector<int32_t> body = tokenizer.encode(record["text"].get<std::string>());
    doc.insert(doc.end(), body.begin(), body.end());
    doc.push_back(special.eos);
    documents.push_back(std::move(doc));
  });
  if (documents.empty())
    throw Error(input.skipped > 0 ? "no documents (" + input.summary() + ")" : "no documents")
        .file(path);
  if (stats) *stats = std::move(input);
  return documents;
}

CptLoader::CptLoader(const std::vector<std::vector<int32_t>>& documents, int32_t pad_id,
                     CptLoaderOptions options)
    : packer_(documents_to_items(documents), packing_options(options, pad_id)),
      token_count_(total_tokens(documents)) {}

CptLoader CptLoader::from_jsonl(const std::string& path, const io::Tokenizer& tokenizer,
                                CptLoaderOptions options, std::optional<bool> strict) {
  const io::SpecialTokenIds& special = tokenizer.special_ids();
  JsonlOptions read;
  read.strict = strict.value_or(default_data_strict());
  JsonlStats input;
  const std::vector<std::vector<int32_t>> documents =
      tokenize_text_jsonl(path, tokenizer, read, &input);
  note_data_input(input);
  CptLoader loader(documents, special.pad >= 0 ? special.pad : special.eos, options);
  loader.input_ = std::move(input);
  return loader;
}

}  // namespace trex::train
