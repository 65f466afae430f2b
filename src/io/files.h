// io/files.h: writing files so that readers never see one half-written,
// and a set of files so that either all of them are replaced or none.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

// Not installed, but exported (QKV_API) from libqkv_io.so: the layers above
// (model's checkpoints, viz's pictures) and the command write through it.

// Files replaced together. stage() writes each file's bytes to a temporary in
// its target's directory and fsyncs it; commit() renames them all over their
// targets; a set destroyed uncommitted (an error while staging, say) removes
// its temporaries and leaves every target as it was.
//
// What a path names decides how it is written:
// - a regular file, or nothing yet: temporary + fsync + rename;
// - a symlink: followed (chains too); its final target is replaced as above,
//   so the link stays a link;
// - a character or block device, a FIFO or a socket (/dev/null, /dev/stdout,
//   a named pipe): written in place when staged, never replaced, and a failed
//   write (/dev/full) is an error.
// Errors are qkv::Error "cannot write 'PATH': reason".
class QKV_API FileSet {
 public:
  FileSet() = default;
  FileSet(const FileSet&) = delete;
  FileSet& operator=(const FileSet&) = delete;
  ~FileSet();

  void stage(const std::string& path, std::initializer_list<std::string_view> parts);
  // stage() with the bytes handed over piece by piece: `produce` calls the
  // sink it is given as often as it likes (a file too large to hold whole).
  // An exception from it leaves no temporary and nothing staged.
  using Sink = std::function<void(std::string_view)>;
  using Producer = std::function<void(const Sink&)>;
  void stage_with(const std::string& path, const Producer& produce);
  void commit();

 private:
  struct Staged {
    std::string path, target, tmp;  // as given, symlinks resolved, temporary
  };
  std::vector<Staged> staged_;
};

// The whole of a regular file (a directory, FIFO or device is refused at
// once, never waited on); errors name the path.
QKV_API std::string read_file(const std::string& path);

// One file on its own: a FileSet of one.
QKV_API void write_file_atomic(const std::string& path,
                               std::initializer_list<std::string_view> parts);

// The prefix of every temporary's name (".qkv-tmp.<pid>.<n>"), so that a
// directory's owner can recognise and remove those a killed writer left.
inline constexpr std::string_view kTempPrefix = ".qkv-tmp.";

// .npy and safetensors files staged into a FileSet, for outputs that must be
// replaced together: nothing is visible at any path until the set commits.
// What write_npy writes, staged.
QKV_API void stage_npy(FileSet& files, const std::string& path, const Tensor& t);
// What write_safetensors writes, staged.
QKV_API void stage_safetensors(FileSet& files, const std::string& path,
                               const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata);

}  // namespace qkv
