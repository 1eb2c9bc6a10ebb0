// Replays fuzz inputs without libFuzzer: `trex_fuzz_replay TARGET PATH...`
// feeds every file under each PATH (files or directories, recursively, in
// sorted order) to TARGET's LLVMFuzzerTestOneInput. The regular test suite runs
// it on fuzz/corpus/TARGET and fuzz/regressions/TARGET (fuzz/fuzz.cmake), so
// every crash libFuzzer found stays fixed in the g++ and ASan builds.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "replay_targets.hpp"  // generated: kTargets[] = {name, entry point}

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TARGET [FILE|DIR]...\ntargets:", argv[0]);
    for (const auto& t : kTargets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  const ReplayTarget* target = nullptr;
  for (const auto& t : kTargets)
    if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (target == nullptr) {
    std::fprintf(stderr, "unknown fuzz target '%s'\n", argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::exists(p)) {
      files.push_back(p);
    }  // a target without regressions yet has no fuzz/regressions/TARGET
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    std::fprintf(stderr, "%s: %s (%zu bytes)\n", target->name, f.string().c_str(), bytes.size());
    target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: replayed %zu inputs\n", target->name, files.size());
  return files.empty() ? 1 : 0;
}
