/// @file
/// qkv/optim.h: AdamW with decoupled weight decay, gradient-norm clipping and the
/// warm-up + cosine learning-rate schedule (nanoGPT's recipe).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/export.h"
#include "qkv/gpt.h"

namespace qkv {

/// AdamW's hyperparameters (nanoGPT's defaults).
struct AdamWConfig {
  double beta1 = 0.9;   ///< decay of the first moment
  double beta2 = 0.99;  ///< decay of the second moment
  double eps = 1e-8;    ///< added to the second moment's root
  double weight_decay = 0.1;  ///< on ParamInfo::decay parameters only (matrices)
  double grad_clip = 1.0;     ///< 0 = no clipping
};

/// lr at iteration `it` (0-based): linear warm-up over `warmup` iterations,
/// then cosine decay from `lr` to `min_lr` at `decay_iters`, then `min_lr`.
QKV_API double learning_rate(int64_t it, double lr, double min_lr, int64_t warmup,
                             int64_t decay_iters);

/// AdamW (decoupled weight decay) over a GPT's parameters, with global
/// gradient-norm clipping.
class QKV_API AdamW {
 public:
  /// Zero moments sized for `model`'s parameters.
  AdamW(const GPT& model, const AdamWConfig& cfg);

  /// Clips the gradients to cfg.grad_clip in global L2 norm, then updates
  /// the model's weights. Returns the norm before clipping.
  double step(GPT& model, double lr);

  int64_t steps() const { return t_; }     ///< steps taken (bias correction's t)
  std::vector<float>& m() { return m_; }  ///< first moments, in GPT::params() order
  std::vector<float>& v() { return v_; }  ///< second moments, in GPT::params() order
  void set_steps(int64_t t) { t_ = t; }   ///< for a resume: the steps already taken

 private:
  AdamWConfig cfg_;
  std::vector<float> m_, v_;
  std::vector<uint8_t> decay_;  ///< per weight: 1 where weight decay applies
  int64_t t_ = 0;
};

}  // namespace qkv
