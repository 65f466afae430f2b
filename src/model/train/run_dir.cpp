#include "model/train/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "qkv/checkpoint.h"
#include "qkv/error.h"
#include "io/files.h"

namespace qkv::run_dir {

namespace fs = std::filesystem;
using nlohmann::json;

RunLock::RunLock(const std::string& dir) {
  const std::string path = dir + "/" + kTrainLockName;
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) throw Error("out_dir: cannot create the lock file '" + path + "': " + std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd_);
    if (err == EWOULDBLOCK)
      throw Error("out_dir: '" + dir +
                  "' is in use by another training run (it holds .qkv-train.lock); wait for it to "
                  "finish or choose another out_dir");
    throw Error("out_dir: cannot lock '" + path + "': " + std::strerror(err));
  }
}

RunLock::~RunLock() { close(fd_); }

void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, kTempPrefix.size(), kTempPrefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + kTempPrefix.size(), nullptr, 10);
    if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

void refuse_text_in_run_files(const std::string& dir, const std::string& text_path) {
  std::error_code ec;
  const fs::path text = fs::weakly_canonical(text_path, ec);
  if (ec) return;  // unreadable: reading it has already said so
  for (const char* name : {"log.jsonl", "config.json", "vocab.json", "model.safetensors",
                           "train_state.safetensors", kTrainLockName}) {
    const fs::path written = fs::weakly_canonical(fs::path(dir) / name, ec);
    if (!ec && written == text)
      throw Error("text_path: '" + text_path + "' is the run's own " + name + " in out_dir '" + dir +
                  "', which training overwrites; keep the text outside the run's files");
  }
}

LogFile::LogFile(const std::string& path, bool resume, int64_t next_iter) : path_(path) {
  std::string kept;
  if (resume) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("iter") || !j["iter"].is_number_integer() ||
          j["iter"].get<int64_t>() >= next_iter)
        continue;
      kept += line + "\n";
      if (j.contains("elapsed_s") && j["elapsed_s"].is_number())
        elapsed_before_ = std::max(elapsed_before_, j["elapsed_s"].get<double>());
    }
  }
  write_file_atomic(path_, {kept});
  out_.open(path_, std::ios::app);
  if (!out_) throw Error("cannot write '" + path_ + "'");
}

void LogFile::write(const json& j) {
  out_ << j.dump() << "\n";
  out_.flush();
}

}  // namespace qkv::run_dir
