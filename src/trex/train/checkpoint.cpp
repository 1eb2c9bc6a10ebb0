#include "trex/train/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::train {

namespace fs = std::filesystem;

std::string checkpoints_dir(const std::string& out_dir) {
  return (fs::path(out_dir) / "checkpoints").string();
}

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string write_training_checkpoint(const std::string& out_dir, int64_t step,
                                      const model::Model<float>& model,
                                      const io::Tokenizer& tokenizer, const Optimizer& optimizer,
                                      const nlohmann::json& trainer_state, int64_t keep,
                                      const GatheredOptimizerState* gathered) {
  const fs::path root = checkpoints_dir(out_dir);
  fs::create_directories(root);
  const fs::path final_dir = root / checkpoint_name(step);
  const fs::path temp_dir =
      root / (".tmp-" + checkpoint_name(step) + "." + std::to_string(getpid()));
  // Temporary directories of interrupted writes (this or an earlier process) are incomplete.
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().rfind(".tmp-step-", 0) == 0) fs::remove_all(entry.path());
  fs::create_directories(temp_dir);
  model::save_checkpoint(temp_dir.string(), model.config(), model.params(), model.hash_tables(),
                         model::NamingScheme::kReleased, DType::kF32);
  tokenizer.save((temp_dir / "tokenizer.json").string());
  if (gathered)
    optimizer.save_state((temp_dir / "optimizer.safetensors").string(), gathered->first_moment,
                         gathered->second_moment);
  else
    optimizer.save_state((temp_dir / "optimizer.safetensors").string());
  write_file_atomic((temp_dir / "trainer_state.json").string(), trainer_state.dump(2) + "\n");
  // A checkpoint of the same step (a rerun) is replaced whole.
  fs::remove_all(final_dir);
  fs::rename(temp_dir, final_dir);
  write_file_atomic((root / "latest").string(), checkpoint_name(step) + "\n");

  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());  // zero-padded: lexical = numeric order
  const int64_t excess = static_cast<int64_t>(steps.size()) - std::max<int64_t>(keep, 1);
  for (int64_t i = 0; i < excess; ++i)
    if (steps[static_cast<size_t>(i)] != checkpoint_name(step))
      fs::remove_all(root / steps[static_cast<size_t>(i)]);
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& out_dir) {
  const fs::path pointer = fs::path(checkpoints_dir(out_dir)) / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_file(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' '))
    name.pop_back();
  const fs::path dir = fs::path(checkpoints_dir(out_dir)) / name;
  if (name.empty() || !fs::is_directory(dir))
    throw Error("the latest-checkpoint pointer names a missing directory \"" + name + "\"")
        .file(pointer.string());
  return dir.string();
}

nlohmann::json read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  if (!fs::exists(path)) throw Error("checkpoint has no trainer_state.json").file(path);
  nlohmann::json state = nlohmann::json::parse(read_file(path), nullptr, false);
  if (state.is_discarded() || !state.is_object())
    throw Error("trainer_state.json is not a JSON object").file(path);
  return state;
}

}  // namespace trex::train
