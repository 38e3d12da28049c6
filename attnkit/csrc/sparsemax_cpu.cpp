// Exact sparsemax along the last dim, one pass per row in cache (CPU).
//
// For a row x (already multiplied by `scale` = 1 / (1 - lam) for sparsegen-lin):
//   m   = max_j x_j                       (a row of all -inf gives zeros)
//   tau = Michelot's fixed point:         tau <- (sum_{x_j > tau} x_j - 1) / #{x_j > tau}
//         starting from tau = m - 1 (below the threshold); it rises monotonically and
//         stops at the exact threshold when no entry is dropped.
//   p_j = max(0, x_j - tau)
// Backward (closed form): g_z = scale * s * (g - mean_{j in S} g_j), s = 1[p > 0].

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

// Thresholds are computed in double: attention scores reach |x| ~ 30, where float
// rounding of x - tau alone is ~2e-6.
//
// Every pass runs over the whole row with masks instead of compacting the candidates:
// a compaction loop is serial (one store per entry), while a masked sum and count over
// the row vectorises; Michelot needs few passes (about 2-3 for sparsemax on attention
// scores, 5-6 for sparsegen-lin at lam = -4 on flat random rows).
template <typename T>
void forward_rows(const T* z, T* p, int32_t* support, int64_t rows, int64_t n, double scale) {
  using A = double;
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = z + r * n;
      T* out = p + r * n;
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)  // with -fopenmp-simd: a vectorised max (a plain loop stays scalar)
      for (int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
      if (!(mx > -std::numeric_limits<T>::infinity())) {  // fully masked row: all zeros
        for (int64_t j = 0; j < n; ++j) out[j] = T(0);
        support[r] = 0;
        continue;
      }
      // Start below the threshold: tau >= max - 1 (scale > 0 keeps the order), so every
      // support entry is among {y > max - 1}. Michelot's step
      //   tau <- (sum_{y > tau} y - 1) / #{y > tau}
      // then rises monotonically to the exact threshold; stop when the set stops shrinking.
      A tau = A(mx) * scale - A(1);
      int64_t c = n + 1;
      for (int it = 0; it < 4 * 64; ++it) {
        int64_t k = 0;
        A s = 0;
        for (int64_t j = 0; j < n; ++j) {
          const A y = A(x[j]) * scale;
          const bool keep = y > tau;
          k += keep;
          s += keep ? y : A(0);
        }
        // k == c: converged (tau came from this very set). k > c or k == 0 cannot happen
        // in exact arithmetic; if rounding produces them, tau is already the threshold to
        // within rounding: stop there too.
        if (k >= c || k == 0) break;
        c = k;
        tau = (s - A(1)) / A(c);
      }
      for (int64_t j = 0; j < n; ++j) {
        const A v = A(x[j]) * scale - tau;
        out[j] = v > A(0) ? T(v) : T(0);
      }
      support[r] = static_cast<int32_t>(c);
    }
  });
}

template <typename T>
void backward_rows(const T* p, const T* g, T* gz, int64_t rows, int64_t n, T scale) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* pr = p + r * n;
      const T* gr = g + r * n;
      T* out = gz + r * n;
      T s = 0;
      int64_t k = 0;
      for (int64_t j = 0; j < n; ++j) {  // branchless: vectorises
        const bool keep = pr[j] > T(0);
        s += keep ? gr[j] : T(0);
        k += keep;
      }
      const T mean = k > 0 ? s / T(k) : T(0);
      for (int64_t j = 0; j < n; ++j) out[j] = pr[j] > T(0) ? (gr[j] - mean) * scale : T(0);
    }
  });
}

}  // namespace

std::vector<torch::Tensor> sparsemax_forward(torch::Tensor z, double scale) {
  TORCH_CHECK(z.device().is_cpu(), "sparsemax_forward: CPU tensors only");
  auto zc = z.contiguous();
  auto p = torch::empty_like(zc);
  const int64_t n = zc.size(-1);
  const int64_t rows = n == 0 ? 0 : zc.numel() / n;
  auto support = torch::empty(zc.sizes().slice(0, zc.dim() - 1), zc.options().dtype(torch::kInt32));
  AT_DISPATCH_FLOATING_TYPES(zc.scalar_type(), "sparsemax_forward", [&] {
    forward_rows<scalar_t>(zc.data_ptr<scalar_t>(), p.data_ptr<scalar_t>(), support.data_ptr<int32_t>(), rows, n, scale);
  });
  return {p, support};
}

torch::Tensor sparsemax_backward(torch::Tensor p, torch::Tensor g, double scale) {
  TORCH_CHECK(p.device().is_cpu() && g.device().is_cpu(), "sparsemax_backward: CPU tensors only");
  auto pc = p.contiguous();
  auto gc = g.contiguous().to(pc.scalar_type());
  auto gz = torch::empty_like(pc);
  const int64_t n = pc.size(-1);
  const int64_t rows = n == 0 ? 0 : pc.numel() / n;
  AT_DISPATCH_FLOATING_TYPES(pc.scalar_type(), "sparsemax_backward", [&] {
    backward_rows<scalar_t>(pc.data_ptr<scalar_t>(), gc.data_ptr<scalar_t>(), gz.data_ptr<scalar_t>(), rows, n,
                            static_cast<scalar_t>(scale));
  });
  return gz;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &sparsemax_forward, "exact sparsemax of scale * z along the last dim (CPU)");
  m.def("backward", &sparsemax_backward, "closed-form sparsemax backward (CPU)");
}
