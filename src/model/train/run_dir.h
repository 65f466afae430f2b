// run_dir.h: qkv train's output directory: one writer at a time, no stale
// temporaries, and a log that stays consistent with the checkpoint.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace qkv::run_dir {

// The run directory's lock: flock on DIR/.qkv-train.lock, held until the
// process exits (the kernel releases it even after a kill -9). Two runs
// writing one directory would interleave log.jsonl and overwrite each
// other's checkpoints. Throws qkv::Error naming --out when taken.
class RunLock {
 public:
  explicit RunLock(const std::string& dir);
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

 private:
  int fd_ = -1;
};

// Temporaries that killed runs left behind (".qkv-tmp.<pid>.<n>", see
// io/files.h): removed, unless the process that writes them runs.
void remove_stale_temporaries(const std::string& dir);

// Refuses (qkv::Error naming text_path) a training text that is one of the
// files a run writes in `dir` (log.jsonl, the checkpoint's files, the lock),
// through links and ".." too: the run would overwrite what it learns from.
// A text elsewhere in `dir` is fine. `dir` must exist.
void refuse_text_in_run_files(const std::string& dir, const std::string& text_path);

// log.jsonl, one JSON object per line. On resume, lines from iterations at
// or after `next_iter` (written by the interrupted run) are dropped, and
// elapsed_before() is the run's time up to the checkpoint, so elapsed_s
// continues across resumes instead of starting again at 0.
class LogFile {
 public:
  LogFile(const std::string& path, bool resume, int64_t next_iter);
  void write(const nlohmann::json& j);
  double elapsed_before() const { return elapsed_before_; }

 private:
  std::string path_;
  std::ofstream out_;
  double elapsed_before_ = 0.0;
};

}  // namespace qkv::run_dir
