// mapped_weights.cpp: a checkpoint's matrices where its mapped files hold
// them (contract in mapped_weights.h).
#include "model/hf/mapped_weights.h"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "io/safetensors_map.h"

namespace qkv::hf {

std::vector<int64_t> source_rows(const Architecture& arch, const ParamInfo& p) {
  const size_t n = arch.weights.at(p.name).size();
  if (const auto given = arch.source_rows.find(p.name); given != arch.source_rows.end()) return given->second;
  return std::vector<int64_t>(n, p.shape[0] / static_cast<int64_t>(n));
}

template <class E>
MappedWeights<E> map_weights(const GPT& gpt, const Architecture& arch, const std::set<int64_t>& matrices) {
  const char* dtype = std::is_same_v<E, bfloat16> ? "BF16" : "F32";
  MappedWeights<E> out;
  for (const std::string& file : arch.checkpoint.files) {
    auto m = std::make_shared<const SafetensorsMapping>(file);
    for (const SafetensorsEntry& e : m->entries()) {
      const auto source = arch.checkpoint.file_of.find(e.name);
      if (source == arch.checkpoint.file_of.end() || source->second != file) continue;  // another shard's
      const std::byte* at = m->data(e.name);
      // Aligned as E: the kernels read E where it lies.
      if (e.dtype == dtype && reinterpret_cast<uintptr_t>(at) % alignof(E) == 0)
        out.in_file[e.name] = reinterpret_cast<const E*>(at);
    }
    out.keep.push_back(std::move(m));
  }
  for (const ParamInfo& p : gpt.params()) {
    const auto it = arch.weights.find(p.name);
    const bool is_wte = p.name == "transformer.wte.weight", is_matrix = matrices.count(p.offset) > 0;
    if (it == arch.weights.end() || (!is_matrix && !is_wte)) continue;
    const std::vector<int64_t> rows = source_rows(arch, p);
    RowRuns<E> mat;
    for (size_t i = 0; i < it->second.size(); ++i) {
      const auto f = out.in_file.find(it->second[i]);
      if (f == out.in_file.end()) break;
      mat.push_back({f->second, rows[i], arch.transposed.count(p.name) ? RunLayout::in_out : RunLayout::out_in});
    }
    if (mat.size() != it->second.size()) {
      if (is_matrix) return {};
      continue;  // wte alone may be read into the model
    }
    if (is_wte && mat.size() == 1) out.wte = mat[0].at;
    if (is_matrix) out.runs[p.offset] = std::move(mat);
  }
  return out;
}

template MappedWeights<bfloat16> map_weights(const GPT&, const Architecture&, const std::set<int64_t>&);
template MappedWeights<float> map_weights(const GPT&, const Architecture&, const std::set<int64_t>&);

}  // namespace qkv::hf
