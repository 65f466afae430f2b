// hf_folder.cpp: what every Hugging Face architecture shares: config.json,
// the safetensors shards, and the checks on each parameter's tensors.
#include "model/hf/hf_folder.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "core/isa_kernels.h"
#include "io/files.h"
#include "io/json_strict.h"
#include "io/safetensors_map.h"
#include "model/gpt_work.h"
#include "model/hf/mapped_weights.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace qkv::hf {
namespace {

using nlohmann::json;

// A tensor [in, out] of the file (F32, F16 or BF16 bytes where they lie)
// into dst [out, in] as float32, or dst16 as bf16 (exact: the tensor is
// BF16 then), tile by tile (for_tiles). Read from the mapped file, not a copy: a copy's
// fresh pages cost more to touch than the transposition itself.
void transpose_into(const std::byte* src, const std::string& dtype, int64_t in, int64_t out, float* dst,
                    bfloat16* dst16) {
  auto run = [&](auto value) {
    for_tiles(out, in, [&](int64_t o, int64_t i) {
      const float x = value(i * out + o);
      if (dst16) dst16[o * in + i] = bf16_from_float(x);
      else dst[o * in + i] = x;
    });
  };
  auto bits16 = [src](int64_t x) {
    uint16_t b;
    std::memcpy(&b, src + 2 * x, 2);
    return b;
  };
  if (dtype == "F32")
    run([src](int64_t x) {
      float v;
      std::memcpy(&v, src + 4 * x, 4);
      return v;
    });
  else if (dtype == "BF16") run([&](int64_t x) { return bf16_to_float(bfloat16{bits16(x)}); });
  else run([&](int64_t x) { return float_from_half(bits16(x)); });
}

// The other files of the shard series `name` belongs to, that are in dir
// ("model-00001-of-00003.safetensors": model-00002-of-00003.safetensors and
// model-00003-of-00003.safetensors, where they exist); none for a name
// of no series.
std::vector<std::string> series_siblings(const std::string& dir, const std::string& name) {
  static const std::regex kShard(R"((.*)-(\d{1,9})-of-(\d{1,9})\.safetensors)");
  std::smatch m;
  if (!std::regex_match(name, m, kShard)) return {};
  // The folder's own files of the series: one listing, however large the
  // count in the name claims the series is.
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string other = it->path().filename().string();
    std::smatch o;
    if (other != name && std::regex_match(other, o, kShard) && o[1] == m[1] && o[3] == m[3] &&
        it->is_regular_file(ec))
      out.push_back(dir + "/" + other);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The file names model.safetensors.index.json's weight_map gives, by tensor.
std::map<std::string, std::string> index_entries(const std::string& index) {
  const json j = read_json(index, 64);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error("'" + index + "': expected an object with a \"weight_map\" of tensor names to files");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      throw Error("'" + index + "': weight_map[\"" + name + "\"] must be a file name in the folder, found " +
                  json_excerpt(file));
    out[name] = file.get<std::string>();
  }
  if (out.empty()) throw Error("'" + index + "': weight_map lists no files");
  return out;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& dir) {
  Checkpoint c;
  std::map<std::string, std::vector<SafetensorsEntry>> headers;  // by path, each read once
  const auto entries_of = [&](const std::string& path) -> const std::vector<SafetensorsEntry>& {
    auto it = headers.find(path);
    if (it == headers.end()) it = headers.emplace(path, safetensors_entries(path)).first;
    return it->second;
  };
  const auto take = [&](const std::string& path, const SafetensorsEntry& e) {
    c.file_of[e.name] = path;
    c.shapes[e.name] = e.shape;
    c.dtypes[e.name] = e.dtype;
  };
  const std::string single = dir + "/model.safetensors", index = single + ".index.json";
  if (std::filesystem::exists(single) || !std::filesystem::exists(index)) {
    c.files = {single};
    for (const SafetensorsEntry& e : entries_of(single)) take(single, e);
    return c;
  }
  const std::map<std::string, std::string> wanted = index_entries(index);
  for (const auto& [name, file] : wanted) {
    const std::string path = dir + "/" + file;
    if (std::find(c.files.begin(), c.files.end(), path) != c.files.end()) continue;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw Error("'" + index + "' maps '" + name + "' to '" + file + "', which is not in the folder");
    c.files.push_back(path);
  }
  // Each tensor from the shard the index names for it; one it does not name
  // from the first shard that has it.
  for (const std::string& path : c.files)
    for (const SafetensorsEntry& e : entries_of(path)) {
      const auto named = wanted.find(e.name);
      if (named != wanted.end() ? dir + "/" + named->second == path : !c.file_of.count(e.name)) take(path, e);
    }
  // An entry naming a shard without its tensor: the tensor from another
  // shard the index lists, or of the same series ("-of-00003") in the folder.
  std::string first;
  int misplaced = 0;
  for (const auto& [name, file] : wanted) {
    if (c.file_of.count(name)) continue;
    const std::string says = "'" + index + "' maps '" + name + "' to '" + file + "', which has no such tensor";
    std::vector<std::string> candidates = c.files;
    for (const std::string& s : series_siblings(dir, file))
      if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) candidates.push_back(s);
    std::string found;
    for (const std::string& path : candidates) {
      for (const SafetensorsEntry& e : entries_of(path))
        if (e.name == name) {
          take(path, e);
          found = path;
        }
      if (!found.empty()) break;
    }
    if (found.empty()) throw Error(says + ", and no other shard has it");
    if (std::find(c.files.begin(), c.files.end(), found) == c.files.end()) c.files.push_back(found);
    if (misplaced++ == 0) first = says + "; read it from '" + std::filesystem::path(found).filename().string() + "'";
  }
  if (misplaced > 1) first += " (and " + std::to_string(misplaced - 1) + " more entries that name the wrong shard)";
  if (misplaced) c.warnings.push_back(first);
  return c;
}


json read_json(const std::string& path, int max_depth) {
  const std::string text = read_file(path);  // its errors name the path
  try {
    return parse_json_strict(text, max_depth);
  } catch (const Error& e) {
    throw Error("'" + path + "': " + e.what());
  }
}

int64_t int_field(const json& j, const char* key, const std::string& file, int64_t lo) {
  if (!j.contains(key)) throw Error("'" + file + "': missing " + key);
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo)
    throw Error("'" + file + "': " + key + " must be an integer >= " + std::to_string(lo) + ", found " +
                json_excerpt(v));
  return v.get<int64_t>();
}

int64_t int_field_or(const json& j, const char* key, const std::string& file, int64_t lo,
                     int64_t fallback) {
  return j.contains(key) && !j[key].is_null() ? int_field(j, key, file, lo) : fallback;
}

double number_field_or(const json& j, const char* key, const std::string& file, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number() || !std::isfinite(j[key].get<double>()))
    throw Error("'" + file + "': " + key + " must be a number, found " + json_excerpt(j[key]));
  return j[key].get<double>();
}

std::string string_field_or(const json& j, const char* key, const std::string& file,
                            const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string())
    throw Error("'" + file + "': " + key + " must be a string, found " + json_excerpt(j[key]));
  return j[key].get<std::string>();
}

void expect_shape(const TensorShapes& tensors, const std::string& file, const std::string& name,
                  const Shape& want, const char* fields) {
  const auto it = tensors.find(name);
  const std::string says = "'" + file + "': " + fields + " make " + name + " " + shape_str(want);
  if (it == tensors.end()) throw Error(says + ", the checkpoint has no such tensor");
  if (it->second != want) throw Error(says + ", the checkpoint's is " + shape_str(it->second));
}

bool bool_field_or(const json& j, const char* key, const std::string& file, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw Error("'" + file + "': " + key + " must be true or false, found " + j[key].dump());
  return j[key].get<bool>();
}

void require_flag(const json& j, const char* key, bool supported, const std::string& file) {
  if (bool_field_or(j, key, file, supported) != supported)
    throw Error("'" + file + "': " + key + " " + (supported ? "false" : "true") + " is not supported");
}

bool is_hf_folder(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    const json j = json::parse(read_file(path));
    return j.is_object() && j.contains("model_type");
  } catch (const std::exception&) {
    return false;  // qkv's own loader reports what is wrong with it
  }
}

Architecture read_architecture(const std::string& dir) {
  const std::string file = dir + "/config.json";
  const json j = read_json(file, 64);
  if (!j.is_object()) throw Error("'" + file + "': expected a JSON object");
  const std::string type = string_field_or(j, "model_type", file, "");
  Checkpoint checkpoint = read_checkpoint(dir);
  Architecture a;
  if (type == "bert") a = bert_architecture(j, file, checkpoint.shapes);
  else if (type == "gpt2") a = gpt2_architecture(j, file, checkpoint.shapes);
  else if (type == "llama" || type == "mistral" || type == "qwen2") a = llama_architecture(j, file, checkpoint.shapes);
  else throw Error("'" + file + "': model_type \"" + type + "\" is not supported (qkv runs: bert, gpt2, llama, mistral, qwen2)");
  a.checkpoint = std::move(checkpoint);
  return a;
}

namespace {

// Whether a float32 or bf16 value is Inf or NaN: its exponent bits all ones
// (a test on the bits, which the compiler vectorises).
bool non_finite(float x) { return (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u; }
bool non_finite(bfloat16 x) { return (x.bits & 0x7f80u) == 0x7f80u; }

// The first element of x[0 .. n) that is not finite, or -1: chunks split
// between the threads, each counted without a branch, and a chunk with one
// searched.
template <class X>
int64_t first_non_finite(const X* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    int bad = 0;
    for (int64_t i = begin; i < end; ++i) bad |= non_finite(x[i]);
    if (!bad) continue;
    for (int64_t i = begin; i < end; ++i)
      if (non_finite(x[i])) {
        first = std::min(first, i);
        break;
      }
  }
  return first < n ? first : -1;
}

}  // namespace

std::unique_ptr<GPT> load_weights(const std::string& dir, const Architecture& arch) {
  auto gpt = std::make_unique<GPT>(arch.config);
  const std::vector<std::string>& files = arch.checkpoint.files;
  const std::map<std::string, std::string>& dtype_of_tensor = arch.checkpoint.dtypes;
  // The matrices' sources' one dtype ("" when they differ). A bf16
  // checkpoint's matrices stay bf16 (half the memory; the bf16 GEMMs read
  // them as they are), used where the mapped files hold them when they can
  // be (mapped_weights.h), else copied; a float32 one's are mapped the same
  // way, when they can be.
  const std::set<int64_t> matrices = GptLoader::bf16_matrix_offsets(*gpt);
  std::string common;
  bool first = true;
  for (const ParamInfo& p : gpt->params()) {
    if (!matrices.count(p.offset)) continue;
    const auto it = arch.weights.find(p.name);
    if (it == arch.weights.end()) continue;  // refused below
    for (const std::string& source : it->second) {
      const auto d = dtype_of_tensor.find(source);
      const std::string dt = d == dtype_of_tensor.end() ? "" : d->second;
      if (first) common = dt;
      else if (dt != common) common = "";
      first = false;
    }
  }
  const bool hold16 = common == "BF16";
  MappedWeights<bfloat16> map16;
  MappedWeights<float> map32;
  if (hold16) map16 = map_weights<bfloat16>(*gpt, arch, matrices);
  else if (common == "F32") map32 = map_weights<float>(*gpt, arch, matrices);
  std::map<int64_t, bfloat16*> held;  // by parameter offset: where its bf16 values go
  if (!map16.empty()) GptLoader::hold_matrices_mapped(*gpt, map16.runs, map16.wte, map16.keep);
  else if (!map32.empty()) GptLoader::hold_matrices_mapped(*gpt, map32.runs, map32.wte, map32.keep);
  else if (hold16) held = GptLoader::hold_matrices_in_bf16(*gpt);

  // Where each source tensor goes: its parameter, and its rows there, in
  // float32 (dst) or bf16 (dst16).
  struct Slot {
    const ParamInfo* param = nullptr;
    int64_t rows = 0;
    int64_t count = 0;  // its elements
    float* dst = nullptr;
    bfloat16* dst16 = nullptr;
    const bfloat16* mapped16 = nullptr;  // used where the file holds it: nothing to read
    const float* mapped32 = nullptr;
    bool filled = false;
  };
  std::map<std::string, Slot> slots;
  float* w = GptLoader::weights(*gpt);
  for (const ParamInfo& p : gpt->params()) {
    const auto it = arch.weights.find(p.name);
    if (it == arch.weights.end()) throw Error("model: no checkpoint tensor is mapped to " + p.name);
    const size_t n = it->second.size();
    const std::vector<int64_t> rows = source_rows(arch, p);
    if (arch.transposed.count(p.name) && (n != 1 || p.shape.size() != 2))
      throw Error("model: a transposed parameter is one [in, out] matrix, not " + p.name);
    const int64_t row_size = p.size / p.shape[0];
    const auto h = held.find(p.offset);
    int64_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      Slot& s = slots[it->second[i]];
      s = Slot{.param = &p, .rows = rows[i], .count = rows[i] * row_size};
      const bool is_wte = p.name == "transformer.wte.weight";
      if (map16.runs.count(p.offset) || (map16.wte && is_wte)) s.mapped16 = map16.in_file.at(it->second[i]);
      else if (map32.runs.count(p.offset) || (map32.wte && is_wte)) s.mapped32 = map32.in_file.at(it->second[i]);
      else if (h != held.end()) s.dst16 = h->second + at * row_size;
      else s.dst = w + p.offset + at * row_size;
      at += rows[i];
    }
    if (at != p.shape[0]) throw Error("model: the sources of " + p.name + " do not make its rows");
  }
  for (const std::string& file : files) {
    std::vector<SafetensorsEntry> to_transpose;  // this file's [in, out] tensors
    read_safetensors_into(file, [&](const SafetensorsEntry& e) -> SafetensorsTarget {
      const auto it = slots.find(e.name);
      if (it == slots.end()) return {};  // unused (a pooler, position ids)
      const auto source = arch.checkpoint.file_of.find(e.name);
      if (source == arch.checkpoint.file_of.end() || source->second != file) return {};  // another shard's
      Slot& s = it->second;
      const bool transposed = arch.transposed.count(s.param->name) > 0;
      Shape want = s.param->shape;
      want[0] = s.rows;
      if (transposed) std::swap(want[0], want[1]);
      if (e.shape != want)
        throw Error("'" + file + "': tensor " + e.name + " should be " + shape_str(want) +
                    " (from config.json), found " + shape_str(e.shape));
      if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
        throw Error("'" + file + "': tensor " + e.name + " is " + e.dtype + "; weights must be F32, F16 or BF16");
      s.filled = true;
      if (s.mapped16 || s.mapped32) return {};
      if (transposed) {
        to_transpose.push_back(e);
        return {};
      }
      return {s.dst, s.dst16};
    });
    if (to_transpose.empty()) continue;
    // Each tensor's pages mapped as it is read and let go after, so that
    // the whole file is never part of this process's memory at once.
    const SafetensorsMapping mapped(file, /*populate=*/false);
    for (const SafetensorsEntry& e : to_transpose) {
      const Slot& s = slots.at(e.name);
      transpose_into(mapped.data(e.name), e.dtype, s.param->shape[1], s.param->shape[0], s.dst, s.dst16);
      mapped.release(e.name);
    }
  }
  for (const auto& [name, s] : slots)
    if (!s.filled) throw Error("'" + dir + "': the checkpoint has no tensor " + name);
  // Checked per checkpoint tensor (the slots cover every parameter), so the
  // error names the tensor and element the user can find in the file.
  for (const auto& [name, s] : slots) {
    const int64_t bad = s.mapped16 ? first_non_finite(s.mapped16, s.count)
                        : s.mapped32 ? first_non_finite(s.mapped32, s.count)
                        : s.dst16    ? first_non_finite(s.dst16, s.count)
                                     : first_non_finite(s.dst, s.count);
    if (bad >= 0)
      throw Error("'" + dir + "': tensor " + name + " holds a non-finite value at element " + std::to_string(bad));
  }
  if (map16.empty()) GptLoader::held_matrices_read(*gpt);
  const kernels::GemmDotKernels* dot = isa_kernels(active_isa()).gemm_dot;
  if (!map32.empty() && arch.pack_matrices && dot && dot->f32_panels) GptLoader::pack_matrices(*gpt);
  return gpt;
}

}  // namespace qkv::hf
