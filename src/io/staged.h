// .npy and safetensors files staged into a FileSet (io/atomic_file.h), for
// outputs that must be replaced together: nothing is visible at any path
// until the set commits.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "qkv/tensor.h"

namespace qkv {

// What write_npy writes, staged.
void stage_npy(FileSet& files, const std::string& path, const Tensor& t);

// What write_safetensors writes, staged.
void stage_safetensors(FileSet& files, const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace qkv
