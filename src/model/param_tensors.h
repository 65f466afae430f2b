// param_tensors.h: a GPT's parameters as named tensors and back, shared by
// the checkpoint files (checkpoint.cpp) and qkv::Model (model.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/gpt.h"

namespace qkv {

// Copies of the flat weight buffer, one float32 tensor per parameter, in
// ParamInfo order.
std::vector<Tensor> param_tensors(const GPT& model);

// weights [sum of the params' sizes] from `tensors` by the params' names:
// each must be there, float32, of its shape, with finite values; the
// qkv::Error names the first that is not, after 'source'. Tensors no param
// names are not looked at.
void weights_from_tensors(float* weights, const std::vector<ParamInfo>& params,
                          const std::map<std::string, Tensor>& tensors, const std::string& source);

}  // namespace qkv
