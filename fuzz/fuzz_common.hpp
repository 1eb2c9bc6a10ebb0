#pragma once
// Shared helpers of the fuzz targets (docs/fuzzing.md). Every target defines
// LLVMFuzzerTestOneInput; it is linked with libFuzzer (clang, TREX_FUZZ=ON) or
// with replay_main.cpp, which feeds the checked-in corpus and regression inputs
// to it in the regular test suite.
//
// The contract a target checks: a bad input may only end in trex::Error (the
// user-facing error the CLI prints as "trex: error: ..."). Any other exception
// (the CLI's "internal error"), a crash, a sanitizer report, a hang or an
// out-of-memory is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "trex/core/error.hpp"

namespace trex::fuzz {

// A failed property check: prints and aborts, so libFuzzer records the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void check(bool condition, const char* what) {
  if (!condition) fail(what);
}

// Runs `body`; trex::Error is an expected outcome, every other exception a bug.
template <class F>
void expect_only_trex_errors(F&& body) {
  try {
    body();
  } catch (const trex::Error&) {
    // The parser rejected the input with a located, user-facing message.
  } catch (const std::exception& e) {
    fail(std::string("exception other than trex::Error escaped: ") + e.what());
  } catch (...) {
    fail("non-std exception escaped");
  }
}

// A private scratch directory for the process (removed at exit), for parsers
// that only take a path.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string pattern = (base / "trex-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a scratch directory");
    static const std::filesystem::path made(pattern);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(made, ignored);
    });
    return made;
  }();
  return dir;
}

// Writes `data` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write " + path);
  if (size > 0 && std::fwrite(data, 1, size, f) != size) fail("short write to " + path);
  std::fclose(f);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace trex::fuzz
