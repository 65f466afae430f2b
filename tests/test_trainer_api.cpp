// The training loop as a library (qkv/trainer.h): its own argument checks,
// progress through the callback only (nothing printed), and the resume
// point read back by saved_train_options.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "qkv/checkpoint.h"
#include "qkv/trainer.h"

namespace qkv {
namespace {

struct TinyRun {
  std::string dir;
  TrainOptions o;
  TinyRun() {
    dir = (std::filesystem::temp_directory_path() / ("qkv_trainer_api_" + std::to_string(::getpid())))
              .string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string text = dir + "/text.txt";
    std::ofstream(text) << std::string(40, ' ') +
                               "the cat sat on a mat while the dog ran far away and came back "
                               "home to the cat who sat on the mat all day long ";
    std::ofstream(text, std::ios::app) << std::string(2000, 'a');
    o.text_path = text;
    o.out_dir = dir + "/run";
    o.model.layers = 1, o.model.heads = 2, o.model.kv_heads = 2, o.model.embd = 16, o.model.context = 8;
    o.batch = 4, o.iters = 6, o.eval_interval = 3, o.eval_iters = 2, o.log_interval = 2, o.threads = 1;
  }
  ~TinyRun() { std::filesystem::remove_all(dir); }
};

TEST(TrainerApi, ChecksItsOwnArguments) {
  // Each refusal names the field, never a command-line flag: the command
  // and the Python package word it with their own names.
  TinyRun r;
  const std::vector<std::pair<void (*)(TrainOptions&), std::string>> cases = {
      {[](TrainOptions& o) { o.eval_interval = 0; },  // was a division by zero
       "train options: eval_interval must be at least 1, found 0"},
      {[](TrainOptions& o) { o.eval_iters = 0; }, "train options: eval_iters must be at least 1, found 0"},
      {[](TrainOptions& o) { o.log_interval = 0; }, "train options: log_interval must be at least 1"},
      {[](TrainOptions& o) { o.batch = 0; }, "train options: batch must be at least 1, found 0"},
      {[](TrainOptions& o) { o.iters = 0; }, "train options: iters must be at least 1, found 0"},
      {[](TrainOptions& o) { o.stop_at = 4; },  // eval_interval 3: no checkpoint at 4
       "train options: stop_at must be a multiple of eval_interval 3"},
      {[](TrainOptions& o) { o.lr = std::nan(""); }, "train options: lr must be a finite number > 0, found nan"},
      {[](TrainOptions& o) { o.min_lr = 1.0; }, "train options: min_lr must be in [0, lr 0.001], found 1"},
      {[](TrainOptions& o) { o.adam.grad_clip = -1; }, "train options: grad_clip must be a finite number >= 0"},
      {[](TrainOptions& o) { o.threads = -1; }, "threads: expected an integer from 0"},
      {[](TrainOptions& o) { o.ranks = 3; },  // batch 4 does not divide
       "train options: batch must divide by the 3 ranks (each takes an equal share), found 4"},
      {[](TrainOptions& o) { o.out_dir.clear(); }, "train options: out_dir is empty"},
      {[](TrainOptions& o) { o.resume = o.force = true; }, "train options: resume cannot be combined with force"},
      // The model's sizes are checked before any file is read.
      {[](TrainOptions& o) { o.model.heads = 3; }, "model config: heads must divide embd 16, found 3"},
      {[](TrainOptions& o) { o.text_path = "/nonexistent/text.txt"; },
       "text_path: cannot open '/nonexistent/text.txt'"}};
  for (const auto& [bad, expected] : cases) {
    TrainOptions o = r.o;
    bad(o);
    try {
      train(o);
      ADD_FAILURE() << "no error, expected " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << e.what();
    }
  }
}

TEST(TrainerApi, ReportsThroughTheCallbackAndPrintsNothing) {
  TinyRun r;
  std::vector<TrainProgress> seen;
  r.o.on_progress = [&](const TrainProgress& p) { seen.push_back(p); };
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const TrainResult res = train(r.o);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().event, TrainProgress::Event::start);
  EXPECT_GT(seen.front().params, 0);
  EXPECT_EQ(seen.back().event, TrainProgress::Event::done);
  int steps = 0, evals = 0;
  for (const TrainProgress& p : seen) {
    steps += p.event == TrainProgress::Event::step;
    evals += p.event == TrainProgress::Event::eval;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(evals, 3);  // iterations 0, 3 and 6
  EXPECT_TRUE(std::isfinite(res.final_val_loss_full));
  EXPECT_DOUBLE_EQ(seen.back().val_loss_full, res.final_val_loss_full);
  // The warm-up defaulted to min(100, iters / 10) and was saved as such.
  EXPECT_EQ(saved_train_options(r.o.out_dir).warmup, 0);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What train() reports, or "" when it trains.
std::string train_error(const TrainOptions& o) {
  try {
    train(o);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(TrainerApi, LeavesADirectoryItDidNotMakeAlone) {
  // A user's own config.json and notes: neither replaced nor joined by a run.
  TinyRun r;
  const std::string out = r.o.out_dir;
  std::filesystem::create_directories(out);
  std::ofstream(out + "/config.json") << "{\"mine\": 1}\n";
  std::ofstream(out + "/notes.txt") << "keep me\n";
  std::ofstream(out + "/log.jsonl") << "my log\n";
  std::ofstream(out + "/z.txt") << "z\n";
  const std::string refused = train_error(r.o);
  EXPECT_NE(refused.find("out_dir: '" + out + "' is not empty and was not made by qkv (it holds "
                         "'config.json', 'log.jsonl', 'notes.txt' and 1 more); write into a new or "
                         "empty directory, or pass force"),
            std::string::npos)
      << refused;
  EXPECT_EQ(read_all(out + "/config.json"), "{\"mine\": 1}\n");
  EXPECT_EQ(read_all(out + "/log.jsonl"), "my log\n");
  // No lock file left behind: it would mark the directory as qkv's.
  EXPECT_FALSE(std::filesystem::exists(out + "/" + kTrainLockName));
  EXPECT_EQ(train_error(r.o), refused);
  // force writes there, replacing only the files of a run's names.
  r.o.force = true;
  EXPECT_EQ(train_error(r.o), "");
  EXPECT_EQ(read_all(out + "/notes.txt"), "keep me\n");
  EXPECT_NE(read_all(out + "/config.json"), "{\"mine\": 1}\n");
}

TEST(TrainerApi, TakesADirectoryThatIsEmptyOrQkvs) {
  TinyRun r;
  const std::string out = r.o.out_dir;
  std::filesystem::create_directories(out);
  EXPECT_EQ(train_error(r.o), "");  // empty
  // Marked by the lock file alone (a run stopped before its first checkpoint).
  TrainOptions locked = r.o;
  locked.out_dir = r.dir + "/locked";
  std::filesystem::create_directories(locked.out_dir);
  std::ofstream(locked.out_dir + "/" + kTrainLockName);
  std::ofstream(locked.out_dir + "/notes.txt") << "mine\n";
  EXPECT_EQ(train_error(locked), "");
  // Marked by qkv's config.json; the training text kept there does not count.
  const std::string dir = r.dir + "/other";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(out + "/config.json", dir + "/config.json");
  EXPECT_NO_THROW(refuse_foreign_directory(dir, {}));
  std::filesystem::remove(dir + "/config.json");
  std::filesystem::copy_file(r.o.text_path, dir + "/text.txt");
  EXPECT_NO_THROW(refuse_foreign_directory(dir, {dir + "/text.txt"}));
  EXPECT_THROW(refuse_foreign_directory(dir, {}), Error);
  EXPECT_NO_THROW(refuse_foreign_directory(dir + "/not-yet", {}));
}

}  // namespace
}  // namespace qkv
