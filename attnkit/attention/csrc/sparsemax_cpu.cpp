// Exact sparsemax along the last dim, rows in parallel (OpenMP), each row in cache (CPU).
//
// For a row z and `scale` = 1 / (1 - lam) (1 for sparsemax):
//   m   = max_j z_j                       (a row of all -inf gives zeros; a row with a NaN, all NaN;
//                                          a row with +inf entries shares the mass equally among them)
//   y_j = (z_j - m) * scale               shifted by the max where |m * scale| > 1024, so the answer is
//                                          shift-invariant and exact for scores of any magnitude
//   tau = Michelot's fixed point:         tau <- (sum_{y_j > tau} y_j - 1) / #{y_j > tau}
//         starting from tau = max y - 1 (below the threshold); it rises monotonically and
//         stops at the exact threshold when no entry is dropped.
//   p_j = max(0, y_j - tau)
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
// scores, 5-6 for sparsegen-lin at lam = -4 on flat random rows). A pass over a short
// row ends in a horizontal sum and a division that the next pass waits for, so rows are
// processed R at a time with their passes interleaved (measured: 1.3-1.6x faster forward
// at L = 64 and 128 than one row at a time).
// Row max, and whether the row holds a NaN (the max comparison alone would skip it).
template <typename T>
inline T row_max(const T* __restrict x, int64_t n, bool& has_nan) {
  T mx = -std::numeric_limits<T>::infinity();
  T bad = 0;
#pragma omp simd reduction(max : mx) reduction(+ : bad)
  for (int64_t j = 0; j < n; ++j) {
    mx = x[j] > mx ? x[j] : mx;
    bad += x[j] != x[j] ? T(1) : T(0);
  }
  has_nan = bad != T(0);
  return mx;
}

// Rows whose max is at most this in magnitude (after scaling) are not shifted: in double, sums of
// up to thousands of such entries are exact to ~1e-12, and a pass is one subtraction per entry cheaper
// (measured 10-20% at L = 128-256). Larger ones are shifted by their max, so any magnitude is exact.
constexpr double kNoShiftBelow = 1024.0;

// Michelot pass: count and sum of y = (x - m) * scale above tau (SHIFT false: m is 0).
template <bool SHIFT, typename T>
inline void above(const T* __restrict x, int64_t n, double m, double scale, double tau, double& s_out, double& k_out) {
  using A = double;
  A s = 0, k = 0;
#pragma omp simd reduction(+ : s, k)
  for (int64_t j = 0; j < n; ++j) {
    const A y = SHIFT ? (A(x[j]) - m) * scale : A(x[j]) * scale;
    const bool keep = y > tau;
    k += keep ? A(1) : A(0);
    s += keep ? y : A(0);
  }
  s_out = s;
  k_out = k;
}

// R rows at a time: their Michelot passes interleave, so one row's reduction and
// division latency hides behind the others' loads.
template <typename T, int R>
inline void forward_block(const T* __restrict x, T* __restrict out, int32_t* __restrict support, int64_t n, double scale) {
  using A = double;
  A tau[R], m[R];
  int64_t c[R];
  bool live[R], nan_row[R], inf_row[R];
  int nlive = 0;
  for (int i = 0; i < R; ++i) {
    const T mx = row_max(x + i * n, n, nan_row[i]);
    inf_row[i] = !nan_row[i] && mx == std::numeric_limits<T>::infinity();
    live[i] = !nan_row[i] && !inf_row[i] && mx > -std::numeric_limits<T>::infinity();
    m[i] = live[i] && std::abs(A(mx) * scale) > kNoShiftBelow ? A(mx) : A(0);
    // Start below the threshold: tau >= max y - 1 (scale > 0 keeps the order). From a
    // lower bound Michelot's step tau <- (sum_{y > tau} y - 1) / #{y > tau} rises monotonically
    // to the exact threshold; it stops when the set stops shrinking. A fully masked row
    // gets tau = +inf: all zeros, support 0.
    tau[i] = live[i] ? (A(mx) - m[i]) * scale - A(1) : std::numeric_limits<A>::infinity();
    c[i] = live[i] ? n + 1 : 0;
    nlive += live[i];
  }
  for (int it = 0; it < 4 * 64 && nlive > 0; ++it) {
    A s[R], k[R];
    for (int i = 0; i < R; ++i)
      if (live[i]) {
        if (m[i] != A(0)) above<true>(x + i * n, n, m[i], scale, tau[i], s[i], k[i]);
        else above<false>(x + i * n, n, 0.0, scale, tau[i], s[i], k[i]);
      }
    for (int i = 0; i < R; ++i) {
      if (!live[i]) continue;
      const int64_t ki = static_cast<int64_t>(k[i]);
      // ki == c: converged (tau came from this very set). ki > c or ki == 0 cannot
      // happen in exact arithmetic; if rounding produces them, tau is already the
      // threshold to within rounding: stop there too.
      if (ki >= c[i] || ki == 0) {
        live[i] = false;
        --nlive;
      } else {
        c[i] = ki;
        tau[i] = (s[i] - A(1)) / k[i];
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    const T* xr = x + i * n;
    T* o = out + i * n;
    if (nan_row[i]) {  // a NaN anywhere makes the whole row NaN: never a silently renormalised answer
      for (int64_t j = 0; j < n; ++j) o[j] = std::numeric_limits<T>::quiet_NaN();
      support[i] = 0;
      continue;
    }
    if (inf_row[i]) {  // the limit of scores growing without bound: +inf entries share the mass equally
      int64_t cnt = 0;
      for (int64_t j = 0; j < n; ++j) cnt += xr[j] == std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) o[j] = xr[j] == std::numeric_limits<T>::infinity() ? T(1.0 / double(cnt)) : T(0);
      support[i] = static_cast<int32_t>(cnt);
      continue;
    }
    const A t = tau[i], mi = m[i];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const A v = (A(xr[j]) - mi) * scale - t;
      o[j] = v > A(0) ? T(v) : T(0);
    }
    support[i] = static_cast<int32_t>(c[i]);
  }
}

template <typename T>
void forward_rows(const T* z, T* p, int32_t* support, int64_t rows, int64_t n, double scale) {
  constexpr int R = 4;
  at::parallel_for(0, rows, 64, [=](int64_t begin, int64_t end) {
    int64_t r = begin;
    for (; r + R <= end; r += R) forward_block<T, R>(z + r * n, p + r * n, support + r, n, scale);
    for (; r < end; ++r) forward_block<T, 1>(z + r * n, p + r * n, support + r, n, scale);
  });
}

// One row of the backward; restrict pointers and by-value arguments, so the loops
// vectorise even when called from inside an OpenMP region (captures by reference
// would otherwise be reloaded after every store).
template <typename T>
inline void backward_row(const T* __restrict pr, const T* __restrict gr, T* __restrict out, int64_t n, T scale) {
  T s = 0, k = 0;  // k counted in T: one vector type in the loop
#pragma omp simd reduction(+ : s, k)
  for (int64_t j = 0; j < n; ++j) {
    const bool keep = pr[j] > T(0);
    s += keep ? gr[j] : T(0);
    k += keep ? T(1) : T(0);
  }
  const T mean = k > T(0) ? s / k : T(0);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = pr[j] > T(0) ? (gr[j] - mean) * scale : T(0);
}

template <typename T>
void backward_rows(const T* p, const T* g, T* gz, int64_t rows, int64_t n, T scale) {
  at::parallel_for(0, rows, 64, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) backward_row<T>(p + r * n, g + r * n, gz + r * n, n, scale);
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

// How many distinct threads at::parallel_for used over `rows` rows with the kernels' grain:
// 1 when the extension was built without OpenMP (its `omp parallel` is then ignored).
int64_t parallel_threads(int64_t rows) {
  std::vector<char> seen(at::get_num_threads() + 1, 0);
  at::parallel_for(0, rows, 64, [&](int64_t, int64_t) { seen[at::get_thread_num()] = 1; });
  int64_t k = 0;
  for (char c : seen) k += c;
  return k;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &sparsemax_forward, "exact sparsemax of scale * z along the last dim (CPU)");
  m.def("backward", &sparsemax_backward, "closed-form sparsemax backward (CPU)");
  m.def("parallel_threads", &parallel_threads, "distinct threads used by the kernels' parallel loop over `rows` rows");
}
