// The README's embedding example: causal attention over two heads of four
// tokens, through the installed library. Exits non-zero if the fast kernel
// and the reference disagree, so the install test can fail.
#include <cmath>
#include <cstdio>

#include <qkv/attention.h>

int main() {
  qkv::Tensor q(qkv::DType::f32, {2, 4, 8});  // [Hq, N, D]
  for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] = std::sin(0.37f * i);
  const qkv::Tensor& k = q;
  const qkv::Tensor& v = q;

  qkv::AttentionOptions opts;
  opts.causal = qkv::Causal::top_left;
  const qkv::Tensor fast = qkv::attention(q, k, v, opts).out;  // [Hq, N, D]
  opts.kernel = qkv::Kernel::reference;
  const qkv::Tensor ref = qkv::attention(q, k, v, opts).out;

  double worst = 0;
  for (int64_t i = 0; i < fast.numel(); ++i)
    worst = std::fmax(worst, std::fabs(fast.get(i) - ref.get(i)));
  std::printf("out[0, 3, :2] = %.4f %.4f; fast vs reference: %.1e\n", fast.get(24), fast.get(25),
              worst);
  return worst < 1e-5 ? 0 : 1;
}
