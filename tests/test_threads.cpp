// The thread counts the library offers its callers: physical_cores(), the
// command line's default for running a model, against what the machine has.
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "qkv/runtime.h"

namespace {

// Reads /sys the plain way: each online CPU's first hardware-thread sibling.
int cores_from_sysfs() {
  std::set<std::string> firsts;
  for (unsigned cpu = 0; cpu < std::thread::hardware_concurrency(); ++cpu) {
    std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string list;
    if (!(in >> list)) return -1;
    firsts.insert(list.substr(0, list.find_first_of(",-")));
  }
  return static_cast<int>(firsts.size());
}

TEST(Threads, PhysicalCoresCountEachCoreOnce) {
  if (std::getenv("OMP_NUM_THREADS")) GTEST_SKIP() << "OMP_NUM_THREADS is set: physical_cores() follows it";
  const int n = qkv::physical_cores();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, qkv::default_threads());  // never more than the hardware threads
  const int want = cores_from_sysfs();
  if (want < 0) GTEST_SKIP() << "no CPU topology in /sys to compare with";
  EXPECT_EQ(n, want);
}

TEST(Threads, PhysicalCoresFollowOmpNumThreads) {
  const char* before = std::getenv("OMP_NUM_THREADS");
  const std::string saved = before ? before : "";
  setenv("OMP_NUM_THREADS", "3", 1);
  // default_threads() read OMP_NUM_THREADS when the OpenMP runtime started:
  // physical_cores() defers to it, whatever it is now.
  EXPECT_EQ(qkv::physical_cores(), qkv::default_threads());
  if (before) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
}

}  // namespace
