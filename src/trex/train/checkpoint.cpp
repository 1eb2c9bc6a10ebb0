#include "trex/train/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "trex/core/atomic_file.hpp"
#include "trex/core/checksum.hpp"
#include "trex/core/error.hpp"
#include "trex/core/log.hpp"

namespace trex::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTempPrefix = ".tmp-";

// Every regular file of `dir` but the manifest, sorted.
std::vector<std::string> files_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kManifestName)
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Puts the complete `temp` at `final_path` in one step: rename when there is
// nothing there; when a directory of the same name exists (a rerun of a step),
// the two are exchanged atomically (renameat2 RENAME_EXCHANGE) and the old one,
// now at `temp`, is deleted, so `final_path` is never missing. Filesystems
// without the exchange fall back to delete + rename.
void publish_directory(const fs::path& temp, const fs::path& final_path) {
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
      fault_point("checkpoint_exchanged", final_path.string());
      fs::remove_all(temp, ec);
      return;
    }
#endif
    fs::remove_all(final_path);
  }
  if (::rename(temp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    throw Error("cannot publish the checkpoint (rename of " + temp.string() +
                " failed: " + std::strerror(e) + ")")
        .file(final_path.string());
  }
}

// Removes a directory by first renaming it out of sight (.tmp-…), so a crash
// mid-way never leaves a half-deleted step-… directory.
void remove_checkpoint_dir(const fs::path& root, const std::string& name) {
  const fs::path doomed =
      root / (std::string(kTempPrefix) + "delete-" + name + "." + std::to_string(getpid()));
  std::error_code ec;
  fs::rename(root / name, doomed, ec);
  fs::remove_all(ec ? root / name : doomed, ec);
}

}  // namespace

void remove_interrupted_checkpoint_writes(const std::string& out_dir) {
  const fs::path root = checkpoints_dir(out_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0) {
      doomed.push_back(it->path());
    } else if (name.rfind("latest.tmp.", 0) == 0) {
      // AtomicFile's temporary of the pointer: only a dead writer's.
      const std::string pid = name.substr(11);
      if (!pid.empty() && pid.size() < 10 &&
          pid.find_first_not_of("0123456789") == std::string::npos &&
          ::kill(static_cast<pid_t>(std::stol(pid)), 0) == -1 && errno == ESRCH)
        doomed.push_back(it->path());
    }
  }
  for (const fs::path& p : doomed) fs::remove_all(p, ec);
}

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
      root / (std::string(kTempPrefix) + checkpoint_name(step) + "." + std::to_string(getpid()));
  // Temporary directories of interrupted writes or deletions (this or an
  // earlier process) are incomplete.
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().rfind(kTempPrefix, 0) == 0) fs::remove_all(entry.path());
  // A failure (a full disk) removes the partial directory and names what
  // failed; `latest` keeps naming the previous checkpoint.
  auto failed = [&](const std::string& why) {
    std::error_code ec;
    fs::remove_all(temp_dir, ec);
    return Error("checkpoint not written (" + checkpoints_dir(out_dir) +
                 "/latest still names the previous one): " + why)
        .file(final_dir.string());
  };
  try {
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
    // Last: a directory with a manifest is complete, and the manifest's
    // checksums are what a load verifies.
    write_checksum_manifest(temp_dir.string(), files_of(temp_dir));
    fsync_directory(temp_dir.string());
    publish_directory(temp_dir, final_dir);
  } catch (const Error& e) {
    throw failed(e.what());
  } catch (const fs::filesystem_error& e) {
    throw failed(e.what());
  }
  fsync_directory(root.string());
  fault_point("checkpoint_published", final_dir.string());
  // The commit point: `latest` names the new checkpoint (replaced atomically).
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
      remove_checkpoint_dir(root, steps[static_cast<size_t>(i)]);
  fsync_directory(root.string());
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

void verify_checkpoint(const std::string& checkpoint_dir) {
  const ManifestCheck check = verify_checksum_manifest(checkpoint_dir);
  if (!check.has_manifest)
    log::warn("checkpoint ", checkpoint_dir, " has no ", kManifestName,
              " (written before checkpoints carried checksums): loading it unverified");
}

nlohmann::json read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  if (!fs::exists(path)) throw Error("checkpoint has no trainer_state.json").file(path);
  verify_file_against_manifest(path);
  nlohmann::json state = nlohmann::json::parse(read_file(path), nullptr, false);
  if (state.is_discarded() || !state.is_object())
    throw Error("trainer_state.json is not a JSON object").file(path);
  return state;
}

}  // namespace trex::train
