#pragma once
// Atomic file writes: data goes to "<path>.tmp.<pid>" and is renamed over
// <path> only after a successful flush + fsync (then the directory is
// fsynced), so readers see either the old file or the complete new one, never
// a torn write, and a crash (kill -9, power loss after the rename) leaves one
// of the two.
//
// Errors. Every fwrite / fflush / fsync / fclose / rename is checked; a
// failure (a full disk: ENOSPC; a file-size limit: EFBIG) throws trex::Error
// naming the target file and the errno text, after removing the temporary
// file: the target keeps its old content (or stays absent) and nothing partial
// is left. SIGXFSZ: a write past RLIMIT_FSIZE raises SIGXFSZ, whose default
// action kills the process without a word; the first AtomicFile of a process
// sets it to SIG_IGN (only when its disposition is still the default), so the
// write fails with EFBIG and is reported like a full disk. Child processes
// that want the limit enforced by the signal (the eval sandbox) reset it.
//
// Stale temporary files: a process killed mid-write cannot remove its
// "<path>.tmp.<pid>"; the next AtomicFile for the same path removes those of
// processes that no longer exist.
//
// Fault injection (tests only, tests/reliability/kill_test.cpp): the
// environment variable TREX_FAULT_KILL_AT=k makes the process SIGKILL itself
// at the k-th AtomicFile event (1-based, counted over the whole process): the
// temp file opened, each write() call, the temp file flushed + fsynced +
// closed, renamed, the directory fsynced. TREX_FAULT_TRACE=FILE appends one
// line per event ("<k> <event> <target path>") to FILE. TREX_FAULT_RANK=r
// limits both to the process of MPI world rank r (a multi-rank job's test).
// Unset, they cost one branch per event.
#include <cstdio>
#include <string>
#include <string_view>

namespace trex {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // discards the temp file if commit() was not called
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view data);
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error_number);
  void discard();

  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

void write_file_atomic(const std::string& path, std::string_view data);
std::string read_file(const std::string& path);
// Creates the parent directory of `path` if needed.
void ensure_parent_dir(const std::string& path);
// fsync of a directory (after a rename into it); best effort: some
// filesystems refuse directory fds.
void fsync_directory(const std::string& dir);

// The fault-injection hook above, for other writers that publish files
// (checkpoint directories): counts one event and applies TREX_FAULT_KILL_AT /
// TREX_FAULT_TRACE.
void fault_point(const char* event, const std::string& path);

}  // namespace trex
