#include "trex/train/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "trex/core/atomic_file.hpp"
#include "trex/core/checksum.hpp"
#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/padded_collectives.hpp"
#include "trex/train/optim/optimizer_relayout.hpp"
#include "trex/train/parallel_setup.hpp"

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

// Creates OUT/checkpoints and removes the temporary directories of
// interrupted writes or deletions (this or an earlier process): incomplete.
void prepare_checkpoints_root(const fs::path& root) {
  fs::create_directories(root);
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().rfind(kTempPrefix, 0) == 0) fs::remove_all(entry.path());
}

// After the complete `temp_dir` (manifest written) was published as step
// `step` (publish_directory): `latest` (replaced atomically) names it — the
// commit point — and all but the newest `keep` checkpoints are removed.
void commit_checkpoint(const fs::path& root, int64_t step, int64_t keep) {
  const fs::path final_dir = root / checkpoint_name(step);
  fsync_directory(root.string());
  fault_point("checkpoint_published", final_dir.string());
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
  prepare_checkpoints_root(root);
  const fs::path final_dir = root / checkpoint_name(step);
  const fs::path temp_dir =
      root / (std::string(kTempPrefix) + checkpoint_name(step) + "." + std::to_string(getpid()));
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
                           gathered->second_moment, gathered->master);
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
  commit_checkpoint(root, step, keep);
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

void verify_checkpoint(const std::string& checkpoint_dir, parallel::Communicator& world) {
  if (world.size() == 1) {
    verify_checkpoint(checkpoint_dir);
    remember_manifest_verified(checkpoint_dir);
    return;
  }
  // A failure travels as "file\0message", so every rank throws the same error.
  std::string failure;
  bool has_manifest = true;
  try {
    has_manifest =
        verify_checksum_manifest(checkpoint_dir, world.rank(), world.size()).has_manifest;
  } catch (const Error& e) {
    failure = e.file_name() + std::string(1, '\0') + e.message();
  }
  // The first failing rank tells every rank what it found.
  int64_t first = failure.empty() ? world.size() : world.rank();
  world.all_reduce(&first, 1, parallel::DType::kI64, parallel::ReduceOp::kMin);
  if (first < world.size()) {
    const int root = static_cast<int>(first);
    int64_t length = static_cast<int64_t>(failure.size());
    world.broadcast(&length, 1, parallel::DType::kI64, root);
    failure.resize(static_cast<size_t>(length));
    world.broadcast(failure.data(), length, parallel::DType::kU8, root);
    const size_t split = failure.find('\0');
    Error error(failure.substr(split + 1));
    if (split > 0) error.file(failure.substr(0, split));
    throw error;
  }
  if (!has_manifest && world.rank() == 0)
    log::warn("checkpoint ", checkpoint_dir, " has no ", kManifestName,
              " (written before checkpoints carried checksums): loading it unverified");
  remember_manifest_verified(checkpoint_dir);
}

nlohmann::json TrainerState::to_json(const RunConfig& config, int64_t optimizer_step) const {
  return {{"step", step},
          {"total_steps", total_steps},
          {"loader", loader.to_json()},
          {"data_seed", std::to_string(config.data_seed)},
          {"init_seed", std::to_string(config.init_seed)},
          {"consumed_tokens", consumed_tokens},
          {"trained_tokens", trained_tokens},
          {"skipped_steps", skipped_steps},
          {"spikes", spikes},
          {"spike_window", spike_window},
          {"last_validation_loss", last_validation_loss},
          {"optimizer_step", optimizer_step},
          {"run_config", config.to_json()}};
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

TrainerState TrainerState::read(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  const nlohmann::json state = read_trainer_state(checkpoint_dir);
  TrainerState s;
  try {
    s.step = state.at("step").get<int64_t>();
    s.consumed_tokens = state.at("consumed_tokens").get<int64_t>();
    s.trained_tokens = state.at("trained_tokens").get<int64_t>();
    s.skipped_steps = state.at("skipped_steps").get<int64_t>();
    s.spikes = state.at("spikes").get<int64_t>();
    s.spike_window = state.at("spike_window").get<std::vector<double>>();
    s.last_validation_loss = state.value("last_validation_loss", -1.0);
    s.total_steps = state.at("total_steps").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("bad trainer state: ") + e.what()).file(path);
  }
  s.loader = LoaderState::from_json(state.at("loader"), path + ": loader");
  return s;
}

// ---- Checkpoints of a parallel run ----

namespace {

// What data rank `r` of the first stage contributes to the checkpoint that
// world rank 0 writes, as ranges of r's layout: its expert weights (one rank
// per EP rank: dp = 0) and its optimizer state (its ZeRO ranges; unsharded
// with sharded experts, its experts' state, again from dp = 0). Rank 0 holds
// the rest itself.
struct Contribution {
  std::vector<parallel::OptimizerShard> values, state;
};
Contribution contribution_of(const ParallelSetup& setup, int zero, int r,
                             const std::vector<model::ParamSpec>& layout) {
  Contribution c;
  const int ep = setup.grid->shape().ep;
  if (setup.ownership && r / ep == 0)
    c.values = {parallel::role_range(layout, model::ParamRole::kExpert)};
  if (zero > 0) {
    c.state = setup.zero_partition(layout).ranges(r, setup.ownership ? r / ep : r);
  } else if (setup.ownership && r / ep == 0) {
    c.state = c.values;
  }
  return c;
}

int64_t size_of(const std::vector<parallel::OptimizerShard>& ranges) {
  int64_t n = 0;
  for (const parallel::OptimizerShard& r : ranges) n += r.size();
  return n;
}

// The whole model's weights (with sharded experts) and optimizer state (when
// sharded), gathered on world rank 0.
struct WholeState {
  std::vector<float> values;  // empty: the model's own
  GatheredOptimizerState optimizer;
  bool optimizer_gathered = false;
};

// Every other data rank of the first stage sends rank 0 its contribution
// point to point. Returns null on the other ranks and when rank 0 already
// holds everything.
std::unique_ptr<WholeState> gather_whole_state(const ParallelSetup& setup, int zero_level,
                                               const model::Model<float>& model,
                                               const Optimizer& optimizer) {
  if (setup.grid->coords().pp != 0 || setup.grid->data().size() == 1) return nullptr;
  if (!setup.ownership && zero_level == 0) return nullptr;  // rank 0 holds everything
  const bool zero = zero_level > 0;                         // the optimizer holds its ZeRO ranges
  parallel::Communicator& data_comm = setup.grid->data();
  constexpr int kValuesTag = 7100, kFirstMomentTag = 7101, kSecondMomentTag = 7102,
                kMasterTag = 7103;
  const bool master = optimizer.has_master();
  const model::ParamStore<float>& params = model.params();
  if (data_comm.rank() != 0) {
    const Contribution mine = contribution_of(setup, zero_level, data_comm.rank(), params.specs());
    std::vector<float> values;
    for (const parallel::OptimizerShard& r : mine.values) {
      values.resize(values.size() + static_cast<size_t>(r.end - r.begin));
      params.read(r.begin, r.end, values.data() + values.size() - (r.end - r.begin));
    }
    // The optimizer's buffers are its ranges already (or, unsharded, the whole layout).
    const std::vector<float> own_first = optimizer.first_moment();
    const std::vector<float> own_second = optimizer.second_moment();
    const std::vector<float>& own_master = optimizer.master();
    std::vector<float> first, second, master_part;
    if (!zero)
      for (const parallel::OptimizerShard& r : mine.state) {
        first.insert(first.end(), own_first.begin() + r.begin, own_first.begin() + r.end);
        second.insert(second.end(), own_second.begin() + r.begin, own_second.begin() + r.end);
        if (master)
          master_part.insert(master_part.end(), own_master.begin() + r.begin,
                             own_master.begin() + r.end);
      }
    const float* first_data = zero ? own_first.data() : first.data();
    const float* second_data = zero ? own_second.data() : second.data();
    const float* master_data = zero ? own_master.data() : master_part.data();
    std::vector<parallel::Request> sends;
    if (!values.empty())
      sends.push_back(data_comm.isend(values.data(), size_of(mine.values), parallel::DType::kF32, 0,
                                      kValuesTag));
    if (size_of(mine.state) > 0) {
      sends.push_back(data_comm.isend(first_data, size_of(mine.state), parallel::DType::kF32, 0,
                                      kFirstMomentTag));
      sends.push_back(data_comm.isend(second_data, size_of(mine.state), parallel::DType::kF32, 0,
                                      kSecondMomentTag));
      if (master)
        sends.push_back(data_comm.isend(master_data, size_of(mine.state), parallel::DType::kF32, 0,
                                        kMasterTag));
    }
    parallel::wait_all(sends);
    return nullptr;
  }
  // Rank 0: place every contribution (its own first) into the whole layout by name.
  const std::vector<model::ParamSpec> whole =
      setup.ownership ? model::parameter_specs(model.config()) : model.params().specs();
  std::map<std::string, int64_t> whole_offset;
  int64_t total = 0;
  for (const model::ParamSpec& spec : whole) {
    whole_offset.emplace(spec.name, total);
    total += spec.numel();
  }
  auto place = [&](const std::vector<model::ParamSpec>& layout,
                   const std::vector<parallel::OptimizerShard>& ranges, const float* packed,
                   std::vector<float>& out) {
    for (const parallel::OptimizerShard& r : ranges)
      for (size_t i = r.first_spec; i < r.end_spec; ++i) {
        const int64_t n = layout[i].numel();
        std::copy_n(packed, n, out.begin() + whole_offset.at(layout[i].name));
        packed += n;
      }
  };
  auto out = std::make_unique<WholeState>();
  const std::vector<model::ParamSpec>& own_layout = model.params().specs();
  const std::vector<parallel::OptimizerShard> everything = {parallel::whole_shard(own_layout)};
  if (setup.ownership) {
    out->values.assign(static_cast<size_t>(total), 0.0f);
    std::vector<float> decoded;  // a bf16 store's values; an fp32 store is read in place
    if (params.storage() != model::ParamStorage::kF32) decoded = params.copy_values();
    place(own_layout, everything, decoded.empty() ? params.values().data() : decoded.data(),
          out->values);
  }
  out->optimizer_gathered = true;
  out->optimizer.first_moment.assign(static_cast<size_t>(total), 0.0f);
  out->optimizer.second_moment.assign(static_cast<size_t>(total), 0.0f);
  if (master) out->optimizer.master.assign(static_cast<size_t>(total), 0.0f);
  const std::vector<parallel::OptimizerShard>& own_state = zero ? optimizer.ranges() : everything;
  place(own_layout, own_state, optimizer.first_moment().data(), out->optimizer.first_moment);
  place(own_layout, own_state, optimizer.second_moment().data(), out->optimizer.second_moment);
  if (master) place(own_layout, own_state, optimizer.master().data(), out->optimizer.master);
  for (int r = 1; r < data_comm.size(); ++r) {
    const std::vector<model::ParamSpec> layout =
        setup.layout_of_data_rank(r, model.config(), own_layout);
    const Contribution c = contribution_of(setup, zero_level, r, layout);
    std::vector<float> values(static_cast<size_t>(size_of(c.values)));
    std::vector<float> first(static_cast<size_t>(size_of(c.state)));
    std::vector<float> second(first.size());
    std::vector<float> master_part(master ? first.size() : 0);
    std::vector<parallel::Request> receives;
    if (!values.empty())
      receives.push_back(
          data_comm.irecv(values.data(), size_of(c.values), parallel::DType::kF32, r, kValuesTag));
    if (!first.empty()) {
      receives.push_back(data_comm.irecv(first.data(), size_of(c.state), parallel::DType::kF32, r,
                                         kFirstMomentTag));
      receives.push_back(data_comm.irecv(second.data(), size_of(c.state), parallel::DType::kF32, r,
                                         kSecondMomentTag));
      if (master)
        receives.push_back(data_comm.irecv(master_part.data(), size_of(c.state),
                                           parallel::DType::kF32, r, kMasterTag));
    }
    parallel::wait_all(receives);
    place(layout, c.values, values.data(), out->values);
    place(layout, c.state, first.data(), out->optimizer.first_moment);
    place(layout, c.state, second.data(), out->optimizer.second_moment);
    if (master) place(layout, c.state, master_part.data(), out->optimizer.master);
  }
  return out;
}

// ---- Sharded checkpoints: every writer its own files, no gather ----

constexpr const char* kModelIndex = "model.safetensors.index.json";
constexpr const char* kOptimizerIndex = "optimizer.safetensors.index.json";

// What data rank `r` of a stage writes: its part of the ZeRO
// partition of its layout (dense tensors split over the data ranks, experts
// over the ranks holding the same experts) at every ZeRO level, so writers
// share the model evenly and under ZeRO each writes exactly the state it holds.
std::vector<parallel::OptimizerShard> written_ranges(const ParallelSetup& setup, int r,
                                                     const std::vector<model::ParamSpec>& layout) {
  const int ep = setup.grid->shape().ep;
  return setup.zero_partition(layout).ranges(r, setup.ownership ? r / ep : r);
}

// What data rank `r` of pipeline stage `p` writes: written_ranges of its
// layout, without the MTP block's tied copy of the embedding (the embedding
// stage writes embed.weight).
std::vector<parallel::OptimizerShard> written_by(const ParallelSetup& setup, int p, int r,
                                                 const std::vector<model::ParamSpec>& layout,
                                                 const model::ModelConfig& config) {
  std::vector<parallel::OptimizerShard> ranges = written_ranges(setup, r, layout);
  if (model::holds_tied_embedding(config, setup.stages_of(p, config)))
    ranges = parallel::without_tensor(ranges, layout, "embed.weight");
  return ranges;
}

// Every rank learns whether all succeeded; the ones that did not say why.
void agree_or_throw(parallel::Communicator& world, const std::string& failure,
                    const std::string& what) {
  int64_t failed = failure.empty() ? 0 : 1;
  if (world.size() > 1)
    world.all_reduce(&failed, 1, parallel::DType::kI64, parallel::ReduceOp::kMax);
  if (failed == 0) return;
  throw Error(what + ": " + (failure.empty() ? "another rank failed (see its log)" : failure));
}

template <class F>
std::string attempt(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const fs::filesystem_error& e) {
    return e.what();
  }
  return {};
}

// Collective over the world. Into one temporary directory every rank (data
// rank d of pipeline stage p, file k = p·D + d of K = PP·D) writes
// model-{k}-of-{K}.safetensors (the weights of written_by, fp32, released
// names) and optimizer-{k}-of-{K}.safetensors (their moments); rank 0 then writes the small files,
// the two indexes and the manifest (the shards' checksums come from their writers), publishes the
// directory and moves `latest` — the same commit protocol as one rank's.
std::string save_sharded_checkpoint(const RunConfig& config, int64_t step,
                                    const ParallelSetup& setup, const model::Model<float>& model,
                                    const Optimizer& optimizer, const io::Tokenizer& tokenizer,
                                    const nlohmann::json& trainer_state) {
  parallel::Communicator& world = setup.grid->world();
  const fs::path root = checkpoints_dir(config.out_dir);
  const fs::path final_dir = root / checkpoint_name(step);
  // One name every rank knows (only one trainer may use an OUT at a time).
  const fs::path temp_dir = root / (std::string(kTempPrefix) + checkpoint_name(step) + ".sharded");
  const std::string not_written =
      "checkpoint not written (" + (root / "latest").string() + " still names the previous one)";
  auto clean_up = [&] {
    std::error_code ec;
    if (setup.is_root()) fs::remove_all(temp_dir, ec);
  };
  std::string failure;
  if (setup.is_root())
    failure = attempt([&] {
      prepare_checkpoints_root(root);
      fs::create_directories(temp_dir);
    });
  agree_or_throw(world, failure, not_written);

  const std::vector<model::ParamSpec>& own = model.params().specs();
  const std::vector<model::ParamSpec> whole =
      setup.rank_ownership().keeps_everything() ? own : model::parameter_specs(model.config());
  // Every rank writes: file k = pp rank · D + data rank d.
  const int data_ranks = setup.grid->data().size();
  const int writers = data_ranks * setup.grid->shape().pp;
  const int d = setup.grid->data_rank();
  const int k = setup.grid->coords().pp * data_ranks + d;
  // {writer, file index, model file size, crc, optimizer file size, crc}
  std::array<int64_t, 6> mine{};
  failure = attempt([&] {
    const std::vector<parallel::OptimizerShard> ranges =
        written_by(setup, setup.grid->coords().pp, d, own, model.config());
    // Streamed tensor by tensor in bounded pieces: the writer holds no copy
    // of the shard.
    std::vector<TensorToStream> tensors;
    for (const parallel::OptimizerShard& r : ranges)
      for (size_t i = r.first_spec; i < r.end_spec; ++i)
        tensors.push_back(model::stream_parameter(model.params(), own[i], DType::kF32));
    if (k == 0)
      for (TensorToStream& table : model::stream_hash_tables(model.config(), model.hash_tables()))
        tensors.push_back(std::move(table));
    const fs::path model_file = temp_dir / checkpoint_shard_name("model", k, writers);
    const fs::path optimizer_file = temp_dir / checkpoint_shard_name("optimizer", k, writers);
    write_safetensors_streaming(model_file.string(), tensors,
                                {{"format", "pt"}, {"writer", "trex"}});
    optimizer.save_state_shard(optimizer_file.string(), ranges, whole);
    const FileChecksum m = checksum_file(model_file.string());
    const FileChecksum o = checksum_file(optimizer_file.string());
    mine = {1,
            k,
            static_cast<int64_t>(m.size),
            static_cast<int64_t>(m.crc32c),
            static_cast<int64_t>(o.size),
            static_cast<int64_t>(o.crc32c)};
  });
  try {
    agree_or_throw(world, failure, not_written);
  } catch (const Error&) {
    clean_up();
    throw;
  }
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(world.size()));
  if (world.size() > 1) {
    const std::vector<int64_t> counts(static_cast<size_t>(world.size()),
                                      static_cast<int64_t>(mine.size()));
    world.all_gather(mine.data(), all.data(), counts, parallel::DType::kI64);
  } else {
    std::copy(mine.begin(), mine.end(), all.begin());
  }

  if (setup.is_root())
    failure = attempt([&] {
      // The indexes follow from the layouts: the file of data rank r of
      // stage p holds its written ranges (and file 0 the hash tables).
      std::map<std::string, std::string> model_map, optimizer_map;
      int64_t model_bytes = 0;
      for (int p = 0; p < setup.grid->shape().pp; ++p)
        for (int r = 0; r < data_ranks; ++r) {
          const std::vector<model::ParamSpec> layout =
              setup.layout_of_rank(p, r, model.config(), own);
          const std::string model_file =
              checkpoint_shard_name("model", p * data_ranks + r, writers);
          const std::string optimizer_file =
              checkpoint_shard_name("optimizer", p * data_ranks + r, writers);
          for (const parallel::OptimizerShard& range :
               written_by(setup, p, r, layout, model.config()))
            for (size_t i = range.first_spec; i < range.end_spec; ++i) {
              if (!model_map.emplace(layout[i].name, model_file).second)
                throw Error("internal: two checkpoint shards hold tensor " + layout[i].name);
              model_bytes += layout[i].numel() * static_cast<int64_t>(sizeof(float));
              for (const std::string& name :
                   Optimizer::state_tensor_names(layout[i], optimizer.options()))
                optimizer_map[name] = optimizer_file;
            }
        }
      for (const std::string& name : model::hash_table_names(model.config())) {
        model_map[name] = checkpoint_shard_name("model", 0, writers);
        model_bytes += model.config().vocab_size * model.config().num_experts_per_tok *
                       static_cast<int64_t>(sizeof(int64_t));
      }
      std::map<std::string, std::string> optimizer_metadata;
      const SafetensorsFile first_state = SafetensorsFile::open(
          (temp_dir / checkpoint_shard_name("optimizer", 0, writers)).string());
      for (const auto& [key, value] : first_state.metadata().items())
        optimizer_metadata[key] = value.get<std::string>();
      write_checkpoint_index((temp_dir / kModelIndex).string(), model_map,
                             {{"format", "pt"}, {"writer", "trex"}}, model_bytes);
      write_checkpoint_index((temp_dir / kOptimizerIndex).string(), optimizer_map,
                             optimizer_metadata);
      model::save_checkpoint_config(temp_dir.string(), model.config(),
                                    model::NamingScheme::kReleased, DType::kF32);
      tokenizer.save((temp_dir / "tokenizer.json").string());
      write_file_atomic((temp_dir / "trainer_state.json").string(), trainer_state.dump(2) + "\n");
      std::map<std::string, FileChecksum> checksums;
      for (const char* name :
           {"config.json", "tokenizer.json", "trainer_state.json", kModelIndex, kOptimizerIndex})
        checksums[name] = checksum_file((temp_dir / name).string());
      for (size_t k = 0; k < all.size(); k += mine.size()) {
        if (all[k] == 0) continue;
        const size_t r = static_cast<size_t>(all[k + 1]);
        checksums[checkpoint_shard_name("model", r, writers)] = {static_cast<uint64_t>(all[k + 2]),
                                                                 static_cast<uint32_t>(all[k + 3])};
        checksums[checkpoint_shard_name("optimizer", r, writers)] = {
            static_cast<uint64_t>(all[k + 4]), static_cast<uint32_t>(all[k + 5])};
      }
      // Last: a directory with a manifest is complete.
      write_checksum_manifest(temp_dir.string(), checksums);
      fsync_directory(temp_dir.string());
      publish_directory(temp_dir, final_dir);
    });
  try {
    agree_or_throw(world, failure, not_written);
  } catch (const Error&) {
    clean_up();
    throw;
  }
  if (setup.is_root())
    failure = attempt([&] { commit_checkpoint(root, step, config.keep_checkpoints); });
  agree_or_throw(world, failure,
                 "checkpoint " + final_dir.string() + " written, but not committed");
  return final_dir.string();
}

bool use_sharded_format(const RunConfig& config, const ParallelSetup& setup) {
  switch (config.checkpoint_format) {
    case CheckpointFormat::kSharded:
      return true;
    case CheckpointFormat::kWhole:
      return false;
    case CheckpointFormat::kAuto:
      break;
  }
  return setup.grid->world().size() > 1;
}

}  // namespace

bool is_sharded_checkpoint(const std::string& dir) {
  return fs::exists(fs::path(dir) / kOptimizerIndex);
}

std::string save_checkpoint_from_ranks(const RunConfig& config, int64_t step,
                                       const ParallelSetup& setup, const model::Model<float>& model,
                                       const Optimizer& optimizer, const io::Tokenizer& tokenizer,
                                       const nlohmann::json& trainer_state) {
  if (use_sharded_format(config, setup))
    return save_sharded_checkpoint(config, step, setup, model, optimizer, tokenizer, trainer_state);
  if (!setup.stages.empty())  // RunConfig::validate refuses this
    throw Error("a pipelined run saves sharded checkpoints (no rank holds every layer)")
        .field("checkpoint_format");
  std::unique_ptr<WholeState> gathered =
      gather_whole_state(setup, static_cast<int>(config.parallel.zero), model, optimizer);
  std::string dir = (fs::path(checkpoints_dir(config.out_dir)) / checkpoint_name(step)).string();
  if (setup.is_root() && setup.ownership) {
    model::ParamStore<float> store(model::parameter_specs(model.config()));
    store.values() = std::move(gathered->values);
    const model::Model<float> whole(model.config(), std::move(store), model.hash_tables());
    Optimizer whole_optimizer(whole.params(), config.optimizer);
    whole_optimizer.set_state(optimizer.step_count(), std::move(gathered->optimizer.first_moment),
                              std::move(gathered->optimizer.second_moment),
                              std::move(gathered->optimizer.master));
    dir = write_training_checkpoint(config.out_dir, step, whole, tokenizer, whole_optimizer,
                                    trainer_state, config.keep_checkpoints);
  } else if (setup.is_root()) {
    dir = write_training_checkpoint(
        config.out_dir, step, model, tokenizer, optimizer, trainer_state, config.keep_checkpoints,
        gathered && gathered->optimizer_gathered ? &gathered->optimizer : nullptr);
  }
  if (setup.grid->world().size() > 1) setup.grid->world().barrier();
  return dir;
}

void load_checkpoint_optimizer_state(const std::string& dir, const model::ParamStore<float>& params,
                                     const model::ModelConfig& config, Optimizer& optimizer) {
  const std::vector<model::ParamSpec> whole = model::parameter_specs(config);
  if (is_sharded_checkpoint(dir)) {
    // Only the tensors of the optimizer's ranges are read, from the shards holding them.
    optimizer.load_state_shards(CheckpointReader::open((fs::path(dir) / kOptimizerIndex).string()),
                                whole);
    return;
  }
  const std::string file = (fs::path(dir) / "optimizer.safetensors").string();
  const bool whole_store = std::equal(
      params.specs().begin(), params.specs().end(), whole.begin(), whole.end(),
      [](const model::ParamSpec& a, const model::ParamSpec& b) { return a.name == b.name; });
  if (whole_store)
    optimizer.load_state(file);
  else  // a store of some routed experts (EP): by tensor name
    load_optimizer_state_by_name(optimizer, params, file, whole);
}

void load_checkpoint_on_rank(const std::string& dir, const RunConfig& config,
                             const ParallelSetup& setup,
                             const std::vector<parallel::OptimizerShard>& zero_ranges,
                             model::Model<float>& model, Optimizer& optimizer) {
  // Every file against the manifest's checksums before anything is read: a
  // corrupt checkpoint is refused naming the file (never a silent fresh start).
  verify_checkpoint(dir, setup.grid->world());
  // The model's files are one file or an HF multi-file checkpoint (the
  // sharded format); either way read by name, with EP only this rank's experts.
  if (!setup.rank_ownership().keeps_everything()) {
    model::LoadedCheckpoint<float> loaded =
        parallel::load_checkpoint_shard<float>(dir, setup.rank_ownership());
    model = model::Model<float>(std::move(loaded.config), std::move(loaded.params),
                                std::move(loaded.hash_tables));
  } else {
    model = model::Model<float>::from_checkpoint(dir);
  }
  optimizer = make_optimizer(config, model.params(), zero_ranges);
  load_checkpoint_optimizer_state(dir, model.params(), model.config(), optimizer);
}

std::vector<float> gather_full_parameters(const ParallelSetup& setup,
                                          const model::Model<float>& model) {
  const model::ParamStore<float>& params = model.params();
  if (setup.rank_ownership().keeps_everything()) {
    std::vector<float> all(static_cast<size_t>(params.size()));
    params.read(0, params.size(), all.data());
    return all;
  }
  const model::ModelConfig& config = model.config();
  const std::vector<model::ParamSpec> whole = model::parameter_specs(config);
  std::map<std::string, int64_t> offset_of;
  int64_t offset = 0;
  for (const model::ParamSpec& spec : whole) {
    offset_of[spec.name] = offset;
    offset += spec.numel();
  }
  std::vector<float> out(static_cast<size_t>(offset), 0.0f);
  // This rank's tensors (the tied embedding copy is the embedding stage's to give).
  for (const model::ParamSpec& spec : model.params().specs())
    if (!(setup.tied_embedding && spec.name == "embed.weight")) {
      const int64_t at = params.offset(spec.name);
      params.read(at, at + spec.numel(), out.data() + offset_of.at(spec.name));
    }
  if (setup.ownership) {
    // This rank's layout is its dense tensors, then its experts; each expert
    // of this stage comes from its owner.
    std::vector<float> decoded;  // a bf16 store's values; an fp32 store is read in place
    if (params.storage() != model::ParamStorage::kF32) decoded = params.copy_values();
    const std::span<const float> local =
        decoded.empty() ? std::span<const float>(params.values()) : std::span<const float>(decoded);
    const int64_t dense = parallel::role_numel(model.params().specs(), model::ParamRole::kDense);
    parallel::Communicator& ep = setup.grid->ep();
    std::vector<std::vector<model::ParamSpec>> owned(static_cast<size_t>(ep.size()));
    std::vector<int64_t> counts;
    for (int r = 0; r < ep.size(); ++r) {
      const parallel::RankOwnership of_r{
          parallel::ExpertOwnership::of_rank(setup.expert_parallel->owner, r), setup.stages};
      owned[static_cast<size_t>(r)] = parallel::filter_specs(whole, config, of_r);
      counts.push_back(
          parallel::role_numel(owned[static_cast<size_t>(r)], model::ParamRole::kExpert));
    }
    if (static_cast<int64_t>(local.size()) != dense + counts[static_cast<size_t>(ep.rank())])
      throw Error("internal: a buffer of " + std::to_string(local.size()) +
                  " values does not match this rank's parameter layout");
    int64_t experts_total = 0;
    for (int64_t c : counts) experts_total += c;
    std::vector<float> experts(static_cast<size_t>(experts_total));
    parallel::all_gather_in_rounds(ep, local.data() + dense, experts.data(), counts);
    int64_t at = 0;  // rank-major: rank r's experts in its layout order
    for (const std::vector<model::ParamSpec>& specs : owned)
      for (const model::ParamSpec& spec : specs) {
        if (spec.role != model::ParamRole::kExpert) continue;
        std::copy_n(experts.begin() + at, spec.numel(), out.begin() + offset_of.at(spec.name));
        at += spec.numel();
      }
  }
  // Stages hold disjoint tensors (zeros elsewhere): their sum is the model.
  if (setup.grid->pp().size() > 1)
    setup.grid->pp().all_reduce(out.data(), static_cast<int64_t>(out.size()), parallel::DType::kF32,
                                parallel::ReduceOp::kSum);
  return out;
}

}  // namespace trex::train
