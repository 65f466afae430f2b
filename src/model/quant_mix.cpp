// quant_mix.cpp: which type each tensor gets in a mix (qkv/quantize.h),
// the choices llama.cpp's llama-quantize makes for the same names when it
// has no importance matrix.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "qkv/error.h"
#include "qkv/quantize.h"

namespace qkv {
namespace {

struct MixRow {
  QuantMix mix;
  const char* name;
  WeightType base;
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_MOSTLY_*
};

constexpr MixRow kMixes[] = {
    {QuantMix::q8_0, "q8_0", WeightType::q8_0, 7},     {QuantMix::q4_0, "q4_0", WeightType::q4_0, 2},
    {QuantMix::q4_k_m, "q4_k_m", WeightType::q4_k, 15}, {QuantMix::q5_k_m, "q5_k_m", WeightType::q5_k, 17},
    {QuantMix::q6_k, "q6_k", WeightType::q6_k, 18}};

const MixRow& row(QuantMix mix) {
  for (const MixRow& r : kMixes)
    if (r.mix == mix) return r;
  throw Error("quantize: unknown mix " + std::to_string(static_cast<int>(mix)));
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The block number in "blk.N....", or -1.
int64_t layer_of(const std::string& name) {
  long long l = -1;
  return std::sscanf(name.c_str(), "blk.%lld.", &l) == 1 ? l : -1;
}

// The _M mixes' layers that get more bits: the first and last eighths, and
// every third layer between.
bool more_bits(int64_t l, int64_t layers) {
  return l < layers / 8 || l >= 7 * layers / 8 || (l - layers / 8) % 3 == 2;
}

int64_t block_of(WeightType t) { return weight_type_info(t).block; }

}  // namespace

QuantMix quant_mix_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const MixRow& r : kMixes)
    if (lower == r.name) return r.mix;
  throw Error("quantize: unknown type \"" + name + "\" (expected q8_0, q4_0, q4_k_m, q5_k_m or q6_k)");
}

const char* quant_mix_name(QuantMix mix) { return row(mix).name; }
uint32_t quant_mix_file_type(QuantMix mix) { return row(mix).file_type; }

WeightType quant_mix_type(QuantMix mix, const std::string& name, int64_t ne0, int dims, int64_t layers, bool tied) {
  if (dims < 2 || !ends_with(name, "weight") || ends_with(name, "_norm.weight") || name == "position_embd.weight")
    return WeightType::f32;
  const WeightType base = row(mix).base;
  const bool k_mix = mix == QuantMix::q4_k_m || mix == QuantMix::q5_k_m;
  WeightType t = base;
  if (name == "output.weight" || (tied && name == "token_embd.weight")) {
    t = ne0 % block_of(base) != 0 || base == WeightType::q8_0 ? WeightType::q8_0 : WeightType::q6_k;
  } else if (k_mix && (name.find("attn_v.weight") != std::string::npos ||
                       name.find("attn_qkv.weight") != std::string::npos ||
                       name.find("ffn_down") != std::string::npos)) {
    if (more_bits(layer_of(name), layers)) t = WeightType::q6_k;
  }
  // llama.cpp's fallbacks for rows that are not whole super-blocks.
  if (ne0 % block_of(t) != 0)
    t = t == WeightType::q4_k ? WeightType::q5_0 : t == WeightType::q5_k ? WeightType::q5_1 : block_of(t) > 32 ? WeightType::q8_0 : t;
  if (ne0 % block_of(t) != 0) t = WeightType::f16;
  return t;
}

}  // namespace qkv
