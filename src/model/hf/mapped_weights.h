// hf/mapped_weights.h: a checkpoint's matrices used where its files,
// mapped into memory, hold them, instead of being read into the model.
//
// No copy: loading costs the page tables, and the weights' memory is the
// system's file cache (shared with any other process reading the files).
// Possible when every source of every Linear matrix (and of the head) is a
// tensor of one dtype the model computes with as it is stored: BF16 (held
// in bf16, for the bf16 GEMMs) or F32. GPT-2's Conv1D weights, stored
// [in, out], are read that way (RunLayout::in_out). The embedding table is mapped
// too when it is one such tensor.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/gpt_work.h"
#include "model/hf/hf_folder.h"

namespace qkv::hf {

template <class E>
struct MappedWeights {
  std::map<int64_t, RowRuns<E>> runs;             // each matrix, by its parameter's offset
  const E* wte = nullptr;                         // the embedding table, or null
  std::map<std::string, const E*> in_file;        // the source tensors, where they lie
  std::vector<std::shared_ptr<const void>> keep;  // the mappings
  bool empty() const { return keep.empty(); }
};

// The matrices (offsets `matrices`) of `gpt` as runs of rows in the files
// of arch.checkpoint mapped (each tensor in its file there), for E =
// bfloat16 (BF16 tensors) or float (F32); empty when some matrix cannot be
// mapped. Errors are the mapping's (a file that cannot be opened or mapped);
// the tensors' shapes are the reader's to check.
template <class E>
MappedWeights<E> map_weights(const GPT& gpt, const Architecture& arch, const std::set<int64_t>& matrices);

// The rows of parameter p each of its sources holds: stacked sources split
// them evenly (q, k and v of one width), or as arch.source_rows says.
std::vector<int64_t> source_rows(const Architecture& arch, const ParamInfo& p);

}  // namespace qkv::hf
