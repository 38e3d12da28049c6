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

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
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

// A NaN row of the forward (a NaN score makes its whole row NaN) has no support, so the backward's sums would give it
// a zero gradient and hide the NaN from the parameters below: the backwards give it NaN (and alpha NaN), as softmax's
// does. One element read per row.
template <typename T>
inline bool nan_row(const T* pr, int64_t n) {
  return n > 0 && std::isnan(pr[0]);
}

// One row of the backward; restrict pointers and by-value arguments, so the loops
// vectorise even when called from inside an OpenMP region (captures by reference
// would otherwise be reloaded after every store).
template <typename T>
inline void backward_row(const T* __restrict pr, const T* __restrict gr, T* __restrict out, int64_t n, T scale) {
  if (nan_row(pr, n)) return std::fill(out, out + n, std::numeric_limits<T>::quiet_NaN());
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

// ---------------------------------------------------------------------------------------------------- entmax
// 1.5-entmax and alpha-entmax along the last dim (rows in parallel), thresholds in double.
//
// A row z is shifted by its max m and written x_j = d (z_j - m), d = alpha - 1 (1/2 for 1.5-entmax), so that
// p_j = [x_j - tau]_+^(1/d) with sum_j p_j = 1 and tau in [-1, 0) (the max entry has x = 0 and p <= 1). So only
// entries with x > -1 can be in the support: alpha-entmax (and 1.5-entmax's sort-based fallback) gather them in one
// pass (a handful on attention rows) and run the rest of the work on those alone.
//
// 1.5-entmax (1/d = 2) is exact: masked passes over the row (Newton's method from below, ended by the exact root on
// the support; see entmax15_block), with the sort-based closed form (Peters et al. 2019) as the fallback.
// alpha-entmax: f(tau) = sum_j [x_j - tau]_+^(1/d) - 1 is convex and decreasing for 1 < alpha <= 2 (1/d >= 1), so
// Newton's method started below the root (tau = -1: f >= 0) rises monotonically to it and never overshoots; it
// runs on the scores' own scale (s = (tau + 1) / d, where alpha -> 1 stays accurate) until s stops moving
// (quadratic convergence: a handful of steps), and the output is divided by its sum, as the torch path does.
// alpha > 2 is refused before it gets here (f is not convex there).
//
// Backward (closed form, both): q_j = p_j^(2 - alpha) on the support, g_z = q (g - sum(g q) / sum(q)).
// Rows of all -inf give zeros; rows with +inf entries share the mass equally among them; a NaN makes a row NaN.

template <typename T>
inline bool special_row(const T* __restrict z, T* __restrict o, int64_t n, double& m) {
  bool has_nan = false;
  const T mx = row_max(z, n, has_nan);
  if (has_nan) {
    for (int64_t j = 0; j < n; ++j) o[j] = std::numeric_limits<T>::quiet_NaN();
    return true;
  }
  if (mx == std::numeric_limits<T>::infinity()) {
    int64_t cnt = 0;
    for (int64_t j = 0; j < n; ++j) cnt += z[j] == std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) o[j] = z[j] == std::numeric_limits<T>::infinity() ? T(1.0 / double(cnt)) : T(0);
    return true;
  }
  if (mx == -std::numeric_limits<T>::infinity()) {
    for (int64_t j = 0; j < n; ++j) o[j] = T(0);
    return true;
  }
  m = double(mx);
  return false;
}

// The entries that can be in the support: those above the lower bound of the threshold (x > -1, i.e. z > m - 1/d),
// as (x, index) pairs; on attention rows a handful. One pass; the rest of the work runs on these alone.
// (x = scale (z - m) for z > m - reach), branch-free: every entry is written, the count moves only for candidates
struct Candidates {
  std::vector<double> x;
  std::vector<int64_t> idx;
  int64_t k = 0;
};

template <typename T>
inline void candidates(const T* __restrict z, int64_t n, double m, double scale, double reach, Candidates& c) {
  if (int64_t(c.x.size()) < n) {
    c.x.resize(n);
    c.idx.resize(n);
  }
  const T cut = T(m - reach);
  double* __restrict xs = c.x.data();
  int64_t* __restrict is = c.idx.data();
  int64_t k = 0;
  for (int64_t j = 0; j < n; ++j) {
    xs[k] = (double(z[j]) - m) * scale;
    is[k] = j;
    k += z[j] >= cut;  // >=: where m - reach rounds to m in T (|m| >= 2^25 reach in float, 2^54 in double) the max must stay in
  }
  c.k = k;
}

// 1.5-entmax's exact threshold from the sorted candidates (Peters et al. 2019, Algorithm 2): with x sorted descending,
// tau_k = mean_k - sqrt(max(0, 1/k - var_k)); the support is the largest k with tau_k <= x_k. The fallback of
// entmax15_block (a row where its passes stall on rounding or do not settle).
template <typename T>
inline double entmax15_sorted_tau(const T* __restrict z, int64_t n, double m) {
  using A = double;
  thread_local Candidates c;
  candidates(z, n, m, 0.5, 2.0, c);
  const int64_t k = c.k;
  thread_local std::vector<A> sorted;
  sorted.assign(c.x.begin(), c.x.begin() + k);
  std::sort(sorted.begin(), sorted.end(), std::greater<A>());
  A s1 = 0, s2 = 0, tau = -1;
  for (int64_t i = 1; i <= k; ++i) {
    const A x = sorted[i - 1];
    s1 += x;
    s2 += x * x;
    const A mean = s1 / A(i), var = s2 / A(i) - mean * mean;
    const A t = mean - std::sqrt(std::max(A(0), A(1) / A(i) - var));
    if (t > x) break;  // x_i below tau_i: i - 1 is the support (the condition holds for a prefix)
    tau = t;
  }
  return tau;
}

// One masked pass over a row at a lower bound t of the threshold: over S = {x > t}, x = (z - m) / 2, the count and
// the sums of u = x - t and u^2, and the smallest u (vectorised; no compaction, as sparsemax's passes).
template <typename T>
inline void above15(const T* __restrict z, int64_t n, double m, double t, double& k_out, double& su_out, double& su2_out,
                    double& lo_out) {
  using A = double;
  A k = 0, su = 0, su2 = 0, lo = std::numeric_limits<A>::infinity();
#pragma omp simd reduction(+ : k, su, su2) reduction(min : lo)
  for (int64_t j = 0; j < n; ++j) {
    const A u = (A(z[j]) - m) * 0.5 - t;
    const bool keep = u > A(0);
    k += keep ? A(1) : A(0);
    su += keep ? u : A(0);
    su2 += keep ? u * u : A(0);
    lo = keep && u < lo ? u : lo;
  }
  k_out = k;
  su_out = su;
  su2_out = su2;
  lo_out = lo;
}

// 1.5-entmax, exact, R rows at a time with their passes interleaved (as sparsemax's forward_block). With x = (z - m) / 2,
// f(t) = sum_j [x_j - t]_+^2 is convex and decreasing and the threshold tau solves f(tau) = 1, tau in [-1, 0). From a
// lower bound t (start: -1), one pass over S = {x > t} gives
//   - the exact root r of sum_{j in S} (x_j - t')^2 = 1 (the smaller one): r >= tau. If no entry of S lies below r,
//     {x > r} is S and f(r) = 1: r is tau, exactly as the sort-based formula on this support. Done.
//   - otherwise Newton's step t <- t + (f(t) - 1) / -f'(t), which stays below tau (f is convex) and rises
//     quadratically; S shrinks to the support in a few passes (1-4, about 2 on average on N(0, 2^2) rows of 64).
// A row where rounding stalls the rise falls back to the sort-based threshold.
template <typename T, int R>
inline void entmax15_block(const T* __restrict z, T* __restrict out, int64_t n) {
  using A = double;
  A m[R], t[R], tau[R];
  bool live[R], special[R], settled[R];
  int nlive = 0;
  for (int i = 0; i < R; ++i) {
    special[i] = special_row(z + i * n, out + i * n, n, m[i]);
    live[i] = !special[i];
    settled[i] = false;
    t[i] = -1;
    nlive += live[i];
  }
  for (int it = 0; it < 64 && nlive > 0; ++it) {
    A k[R], su[R], su2[R], lo[R];
    for (int i = 0; i < R; ++i)
      if (live[i]) above15(z + i * n, n, m[i], t[i], k[i], su[i], su2[i], lo[i]);
    for (int i = 0; i < R; ++i) {
      if (!live[i]) continue;
      const A mean = su[i] / k[i], disc = A(1) / k[i] - (su2[i] / k[i] - mean * mean);
      if (disc >= 0) {
        const A r = mean - std::sqrt(disc);  // relative to t
        if (r <= lo[i]) {
          tau[i] = t[i] + r;
          settled[i] = true;
          live[i] = false;
          --nlive;
          continue;
        }
      }
      const A next = t[i] + (su2[i] - A(1)) / (A(2) * su[i]);
      if (!(next > t[i])) {  // rounding: no progress (the sort-based threshold answers below)
        live[i] = false;
        --nlive;
      } else {
        t[i] = next;
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    if (special[i]) continue;
    if (!settled[i]) tau[i] = entmax15_sorted_tau(z + i * n, n, m[i]);  // stalled, or not settled in 64 passes
    const T* __restrict zr = z + i * n;
    T* __restrict o = out + i * n;
    const A mi = m[i], ti = tau[i];
    // An entry at the threshold (a tie with tau, as in [0, 0, 0, 0, -1]) is left a rounding error above it by the
    // reassociated sums (v ~ 1e-16, p ~ 1e-32): v within EXACT_TOL of zero is zero. This moves p by < 1e-29, far
    // below the forward's own rounding, and keeps p = 0 exactly where the exact map has it.
    constexpr A EXACT_TOL = 16 * std::numeric_limits<A>::epsilon();
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const A v = (A(zr[j]) - mi) * 0.5 - ti;
      o[j] = v > EXACT_TOL ? T(v * v) : T(0);
    }
  }
}

template <typename T>
inline void entmax_alpha_row(const T* __restrict z, T* __restrict o, int64_t n, double alpha) {
  // Written on the scores' own scale, as the torch path: p_j = [1 + d (x_j - s)]_+^(1/d) = exp(log1p(d t_j) / d),
  // t_j = x_j - s, x = z - m, threshold tau = d s - 1; this tends to exp(x_j - s) (softmax) as d -> 0 with no loss
  // of precision. f(s) = sum p - 1 is convex and decreasing, f'(s) = -sum p^(1 - d); s = 0 is a lower bound, and
  // only the candidates (x > -1/d) can be in the support.
  using A = double;
  A m = 0;
  if (special_row(z, o, n, m)) return;
  const A d = alpha - 1.0;
  if (d <= 0) {  // alpha = 1: softmax
    A sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(A(z[j]) - m);
    for (int64_t j = 0; j < n; ++j) o[j] = T(std::exp(A(z[j]) - m) / sum);
    return;
  }
  thread_local Candidates c;
  candidates(z, n, m, 1.0, 1.0 / d, c);  // x = z - m > -1/d
  const int64_t k = c.k;
  // the candidates' values sorted descending: at any s only a prefix (x > s - 1/d) has mass
  thread_local std::vector<A> xs;
  xs.assign(c.x.begin(), c.x.begin() + k);
  std::sort(xs.begin(), xs.end(), std::greater<A>());
  // Newton's method on the active prefix (sorted: entries drop off its end as s rises). The root on a subset of
  // the entries is a lower bound of the root on all of them (their f is smaller), so it first runs on the top few
  // (cheap), then on the whole prefix from there. p^(1 - d) = (1 + dt)^(1/d - 1) is computed, and p from it by one
  // product: no division in the loop (its latency was a third of the row's time). It runs until s stops moving
  // (an entry just above the support's edge makes f's curvature unbounded for 1.5 < alpha < 2, so a small step
  // does not promise a smaller next one).
  const A e = 1.0 / d - 1.0;
  auto newton = [&](A s, int64_t upto) {
    for (int it = 0; it < 200; ++it) {
      A f = -1, df = 0;
      for (int64_t i = 0; i < upto; ++i) {
        const A dt = d * (xs[i] - s);
        if (!(dt > -1)) {
          upto = i;  // no later entry has mass at this s or any larger one
          break;
        }
        const A q = std::exp(std::log1p(dt) * e);  // p^(1 - d)
        df += q;
        f += q * (1 + dt);  // p
      }
      const A next = s + f / df;
      if (!(next > s) || next - s <= 1e-15 * (1 + std::abs(s))) break;
      s = next;
    }
    return s;
  };
  A s = newton(0.0, std::min<int64_t>(k, 8));
  if (k > 8) s = newton(s, k);
  thread_local std::vector<A> pv;
  pv.assign(k, A(0));
  A total = 0;
  for (int64_t i = 0; i < k; ++i) {  // in the candidates' own order (c.x, aligned with c.idx)
    const A dt = d * (c.x[i] - s);
    pv[i] = dt > -1 ? std::exp(std::log1p(dt) / d) : A(0);
    total += pv[i];
  }
  std::fill(o, o + n, T(0));
  for (int64_t i = 0; i < k; ++i) o[c.idx[i]] = T(pv[i] / total);
}

// ------------------------------------------------------------------------------- alpha-entmax on float32 rows
// float32 rows (what attention layers compute in, bf16/fp16 autocast included) take a vectorised path: the same
// problem on the scores' own scale, but in float SIMD lanes with exp and log written out as polynomials (Cephes'
// expf/logf, 1-2 ulp), which the compiler vectorises (glibc's are called one entry at a time; its vector versions need
// -ffast-math, which would break -inf and NaN). float64 rows keep the double path above (libm to the last bit: the
// tests check it against the entmax package at 1e-12).
//  - only the candidates (x = z - m > -1/d) are kept, compacted into a buffer padded to whole vectors (AVX-512's
//    compress instructions where the CPU has them);
//  - four rows' passes interleave (as sparsemax's), so one row's reductions and step hide behind the others';
//  - a pass costs one log and one exp per candidate: l = log1p(d t), q = exp((1/d - 1) l) = p^(1 - d), p = q (1 + d t);
//  - Halley's method (f'' from the same pass) where it is safe, else Newton's, from s = 0 below the root; the last
//    pass's masses are extrapolated to the final s (first order, its remainder bounded by f'' st^2 / 2 < 1e-8), so no
//    pass is spent confirming a step of ~0: 3.2-3.4 passes per row on N(0, 2^2) rows at alpha = 1.3, L = 64-256,
//    where Newton's method to a step of ~0 took 5-6 (one log1p and one exp per candidate in double each).
// Accuracy against the double path: ~2e-7 (float32's own rounding of the output; entries at the edge of the support
// are as sensitive to the scores' own float rounding), checked on N(0, s^2) rows for s from 0.01 to 100, -inf masked
// and tied rows, alpha from 1.001 to 2, L from 1 to 256. The backward runs on the support alone, compacted the same way.

inline float f32_from_bits(int32_t b) { return __builtin_bit_cast(float, b); }
inline int32_t f32_bits(float f) { return __builtin_bit_cast(int32_t, f); }

// exp(x) for x <= 88 (Cephes expf); 0 below -87 (the normal range's end: those masses are below float's resolution)
inline float exp_f32(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float k = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float y = 1.9875691500E-4f;
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * (r * r) + r + 1.0f;
  const float scale = f32_from_bits((static_cast<int32_t>(k) + 127) << 23);
  return x < -87.0f ? 0.0f : y * scale;
}

// log(u) for a normal u > 0 (Cephes logf); um1 = u - 1 as the caller knows it exactly (log1p: d t itself), used
// where u is within [sqrt(1/2), sqrt(2)) so that log1p keeps its relative precision near 0
inline float log_f32(float u, float um1) {
  const int32_t b = f32_bits(u);
  int32_t e = (b >> 23) - 127;
  float m = f32_from_bits((b & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool big = m > 1.41421356237f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1 : e;
  const float x = e == 0 ? um1 : m - 1.0f;
  const float z = x * x;
  float y = 7.0376836292E-2f;
  y = y * x - 1.1514610310E-1f;
  y = y * x + 1.1676998740E-1f;
  y = y * x - 1.2420140846E-1f;
  y = y * x + 1.4249322787E-1f;
  y = y * x - 1.6668057665E-1f;
  y = y * x + 2.0000714765E-1f;
  y = y * x - 2.4999993993E-1f;
  y = y * x + 3.3333331174E-1f;
  y = y * x * z;
  const float fe = static_cast<float>(e);
  y += fe * -2.12194440e-4f;
  y += -0.5f * z;
  return x + y + fe * 0.693359375f;
}

constexpr int kW = 16;  // candidates padded to a multiple of 16 floats (one AVX-512 vector; measured faster than 8 on Zen 4)

// One pass over a row's padded candidates at s: with t = x - s, u = 1 + d t, p = u^(1/d), q = p^(1 - d) = p / u,
//   sum p = f + 1,  sum q = -f',  sum q / u = f'' / (1 - d);
// p and q are kept (the output is extrapolated from the last pass, see entmax_alpha_block_f32).
inline void alpha_pass_f32(const float* __restrict xs, int64_t kpad, float d, float e, float s, float& sp_out, float& sq_out,
                           float& sc_out, float& umin_out, float* __restrict pv, float* __restrict qv) {
  float sp = 0, sq = 0, sc = 0, umin = std::numeric_limits<float>::infinity();
#pragma omp simd reduction(+ : sp, sq, sc) reduction(min : umin) simdlen(kW)
  for (int64_t i = 0; i < kpad; ++i) {
    const float dt = d * (xs[i] - s);
    const float u = 1.0f + dt;
    const bool on = dt > -1.0f && u >= std::numeric_limits<float>::min();
    const float uu = on ? u : 1.0f;
    const float l = log_f32(uu, on ? dt : 0.0f);  // log1p(d t) <= 0
    const float q = on ? exp_f32(l * e) : 0.0f;
    const float p = q * uu;
    sq += q;
    sp += p;
    // q / u for f'' (Halley's step and the stopping rule need it to a few digits only): 1/u from the exponent trick
    // and two Newton steps (relative error ~2e-4), cheaper than a division per entry
    float ru = f32_from_bits(0x7EF311C3 - f32_bits(uu));
    ru = ru * (2.0f - uu * ru);
    ru = ru * (2.0f - uu * ru);
    sc += q * ru;
    umin = on && u < umin ? u : umin;
    pv[i] = p;
    qv[i] = q;
  }
  sp_out = sp;
  sq_out = sq;
  sc_out = sc;
  umin_out = umin;
}

// The entries of a row with x = z - m > cut, compacted: xs[0..c) (x) and is[0..c) (their columns); returns c. The
// buffers hold n + 16 entries. With AVX-512, 16 entries per step by the compress instructions (register form: the
// memory form is microcoded on AMD's Zen 4); otherwise branch-free (every entry written, the count moves for those kept).
inline int64_t compact_above(const float* __restrict z, int64_t n, float m, float cut, float* __restrict xs,
                             int32_t* __restrict is) {
  int64_t c = 0, j = 0;
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m), cv = _mm512_set1_ps(cut);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(z + j), mv);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, cv, _CMP_GT_OQ);
    _mm512_storeu_ps(xs + c, _mm512_maskz_compress_ps(keep, x));
    _mm512_storeu_si512(is + c, _mm512_maskz_compress_epi32(keep, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(j)))));
    c += __builtin_popcount(static_cast<unsigned>(keep));
  }
#endif
  for (; j < n; ++j) {
    const float x = z[j] - m;
    xs[c] = x;
    is[c] = static_cast<int32_t>(j);
    c += x > cut;
  }
  return c;
}

// R float32 rows of alpha-entmax, one alpha per row. f(s) = sum p - 1 is convex and decreasing; from s = 0 (below
// the root) each pass takes Halley's step s + N / (1 - N C) where it is safe (N C < 1/2; N = f / -f' is Newton's step,
// C = f'' / 2|f'|), else Newton's (which never overshoots from below; after an overshoot, Newton's step from above
// lands below the root again). The search ends at the pass whose step st leaves a second-order remainder
// f'' st^2 / 2 below 1e-8 and moves no entry out of the support: the output is then the first-order extrapolation p - q st of that pass's masses (no
// further pass), clamped at 0 and divided by its sum. 2-4 passes on attention rows (one log and one exp per
// candidate each), against 5-6 for Newton's method run to a step of ~0.
template <int R>
inline void entmax_alpha_block_f32(const float* __restrict z, float* __restrict out, int64_t n, const double* __restrict alpha) {
  constexpr int64_t V = kW;  // padded to whole vectors
  const int64_t stride = (n + 2 * V) / V * V;
  thread_local std::vector<float> xbuf, pbuf, qbuf;
  thread_local std::vector<int32_t> ibuf;
  if (int64_t(xbuf.size()) < R * stride) {
    xbuf.resize(R * stride);
    pbuf.resize(R * stride);
    qbuf.resize(R * stride);
    ibuf.resize(R * stride);
  }
  double s[R], st[R];
  float d[R], e[R];
  int64_t kpad[R], k[R];
  bool live[R], work[R];
  int nlive = 0;
  for (int i = 0; i < R; ++i) {
    const float* __restrict zr = z + i * n;
    double m = 0;
    work[i] = false;
    live[i] = false;
    if (special_row(zr, out + i * n, n, m)) continue;
    if (!(alpha[i] - 1.0 > 0)) {  // alpha = 1: softmax, the double path's code
      entmax_alpha_row<float>(zr, out + i * n, n, alpha[i]);
      continue;
    }
    work[i] = live[i] = true;
    ++nlive;
    d[i] = static_cast<float>(alpha[i] - 1.0);
    e[i] = static_cast<float>(1.0 / (alpha[i] - 1.0) - 1.0);
    s[i] = 0.0;
    st[i] = 0.0;
    // the candidates, compacted: x = z - m > -1/d (branch-free: every entry written, the count moves for candidates)
    const float mf = static_cast<float>(m), cut = static_cast<float>(-1.0 / (alpha[i] - 1.0));
    float* __restrict xs = xbuf.data() + i * stride;
    int32_t* __restrict is = ibuf.data() + i * stride;
    const int64_t c = compact_above(zr, n, mf, cut, xs, is);
    k[i] = c;
    kpad[i] = (c + V - 1) / V * V;
    for (int64_t j = c; j < kpad[i]; ++j) xs[j] = -std::numeric_limits<float>::infinity();
  }
  for (int it = 0; it < 64 && nlive > 0; ++it) {
    float sp[R], sq[R], sc[R], umin[R];
    for (int i = 0; i < R; ++i)
      if (live[i])
        alpha_pass_f32(xbuf.data() + i * stride, kpad[i], d[i], e[i], static_cast<float>(s[i]), sp[i], sq[i], sc[i], umin[i],
                       pbuf.data() + i * stride, qbuf.data() + i * stride);
    for (int i = 0; i < R; ++i) {
      if (!live[i]) continue;
      const double f = double(sp[i]) - 1.0, df = double(sq[i]), ddf = (1.0 - double(d[i])) * double(sc[i]);
      const double N = f / df, NC = N * ddf / (2.0 * df);
      const double step = NC > 0 && NC < 0.5 ? N / (1.0 - NC) : N;
      st[i] = step;
      // done: the extrapolation's remainder is below 1e-8, no entry leaves the support within the step (p - q st =
      // q (u - st) stays positive: the smallest u is above 2 st), and the step does not go back over entries that
      // would re-enter it (their mass at most (d |st|)^(1/d) <= |st|)
      if ((0.5 * ddf * step * step < 1e-8 && step > -1e-7 * (1.0 + s[i]) && double(umin[i]) > 2.0 * step) || it == 63 ||
          !(df > 0)) {
        live[i] = false;
        --nlive;
      } else {
        s[i] += step;
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    if (!work[i]) continue;
    float* __restrict pv = pbuf.data() + i * stride;
    const float* __restrict qv = qbuf.data() + i * stride;
    const float sf = static_cast<float>(st[i]);
    float tot = 0;
#pragma omp simd reduction(+ : tot)
    for (int64_t j = 0; j < kpad[i]; ++j) {
      const float v = pv[j] - qv[j] * sf;
      pv[j] = v > 0.0f ? v : 0.0f;
      tot += pv[j];
    }
    float* __restrict o = out + i * n;
    const int32_t* __restrict is = ibuf.data() + i * stride;
    const float inv = 1.0f / tot;
    std::fill(o, o + n, 0.0f);
    for (int64_t j = 0; j < k[i]; ++j) o[is[j]] = pv[j] * inv;
  }
}

// The backward of a float32 row (see entmax_backward_row): q = p^(1 - d) by float log and exp; alpha's gradient from
// r = q - p (p expm1(-d log p) where that is small, so its relative precision holds as alpha -> 1) rather than from
// q itself: with the sums A = sum g p, H = sum p log p, B = sum g p log p, R = sum r, G = sum g r and sum p = 1,
//   grad_alpha = [(A R - G) / d^2 - ((B - H A) + (B R - H G)) / d] / sum q,
// the package's formula with its O(1/d^2) terms cancelled by hand (in float they would leave ~1e-7 / d^2).
inline double entmax_backward_row_f32(const float* __restrict pr, const float* __restrict gr, float* __restrict out, int64_t n,
                                      double alpha) {
  if (nan_row(pr, n)) {
    std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN());
    return std::numeric_limits<double>::quiet_NaN();
  }
  const float d = static_cast<float>(alpha - 1.0), c = 1.0f - d;
  // the support's p, g and columns, compacted (a handful of entries on attention rows), padded with p = 0
  thread_local std::vector<float> pbuf, gbuf, qbuf;
  thread_local std::vector<int32_t> ibuf;
  if (int64_t(pbuf.size()) < n + 32) {
    pbuf.resize(n + 32);
    gbuf.resize(n + 32);
    qbuf.resize(n + 32);
    ibuf.resize(n + 32);
  }
  float* __restrict ps = pbuf.data();
  float* __restrict gs = gbuf.data();
  float* __restrict qs = qbuf.data();
  int32_t* __restrict is = ibuf.data();
  int64_t k = 0, j = 0;
#if defined(__AVX512F__)
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; j + 16 <= n; j += 16) {
    const __m512 p = _mm512_loadu_ps(pr + j);
    const __mmask16 on = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(ps + k, _mm512_maskz_compress_ps(on, p));
    _mm512_storeu_ps(gs + k, _mm512_maskz_compress_ps(on, _mm512_loadu_ps(gr + j)));
    _mm512_storeu_si512(is + k, _mm512_maskz_compress_epi32(on, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(j)))));
    k += __builtin_popcount(static_cast<unsigned>(on));
  }
#endif
  for (; j < n; ++j) {
    ps[k] = pr[j];
    gs[k] = gr[j];
    is[k] = static_cast<int32_t>(j);
    k += pr[j] > 0.0f;
  }
  const int64_t kpad = (k + 15) / 16 * 16;
  for (int64_t i = k; i < kpad; ++i) {
    ps[i] = 0.0f;
    gs[i] = 0.0f;
  }
  float sq = 0, sgq = 0, sa = 0, sh = 0, sb = 0, sr = 0, sg = 0;
#pragma omp simd reduction(+ : sq, sgq, sa, sh, sb, sr, sg) simdlen(16)
  for (int64_t i = 0; i < kpad; ++i) {
    const float p = ps[i], g = gs[i];
    const bool on = p > 0.0f;
    const bool tiny = p < std::numeric_limits<float>::min();  // subnormal: scaled by 2^24 first
    const float pp = on ? (tiny ? p * 16777216.0f : p) : 1.0f;
    const float lp = log_f32(pp, pp - 1.0f) - (tiny ? 16.63553233f : 0.0f);
    const float q = on ? exp_f32(c * lp) : 0.0f;
    const float y = -d * lp;  // >= 0: q = p e^y
    const float em1 = y * (1.0f + y * (0.5f + y * (1.0f / 6 + y * (1.0f / 24 + y * (1.0f / 120 + y * (1.0f / 720 + y * (1.0f / 5040 + y * (1.0f / 40320))))))));
    const float r = on ? (y <= 0.5f ? p * em1 : q - p) : 0.0f;
    const float plp = on ? p * lp : 0.0f;
    qs[i] = q;
    sq += q;
    sgq += q * g;
    sa += g * p;
    sh += plp;
    sb += g * plp;
    sr += r;
    sg += g * r;
  }
  const float mean = sq > 0.0f ? sgq / sq : 0.0f;
  std::fill(out, out + n, 0.0f);
  for (int64_t i = 0; i < k; ++i) out[is[i]] = qs[i] * (gs[i] - mean);
  const double dd = alpha - 1.0;
  if (!(dd > 0) || !(sq > 0.0f)) return 0.0;
  const double A = sa, H = sh, B = sb, Rs = sr, G = sg;
  return ((A * Rs - G) / (dd * dd) - ((B - H * A) + (B * Rs - H * G)) / dd) / double(sq);
}

// q = p^(2 - alpha) on the support (sqrt(p) for 1.5-entmax); g_z = q (g - sum(g q) / sum(q))
// Returns d loss / d alpha of the row (0 for 1.5-entmax, whose alpha is fixed): with d = alpha - 1, q~ = q / sum(q)
// and H = sum p log p, grad_alpha = sum_i g_i [(p_i - q~_i) / d^2 - (p_i log p_i - q~_i H) / d] (the entmax
// package's formula), from row sums gathered in the same pass as the scores' gradient.
template <typename T>
inline double entmax_backward_row(const T* __restrict pr, const T* __restrict gr, T* __restrict out, int64_t n, double alpha,
                                  bool fixed15) {
  using A = double;
  if (nan_row(pr, n)) {
    std::fill(out, out + n, std::numeric_limits<T>::quiet_NaN());
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (fixed15) {  // 1.5-entmax, q = sqrt(p): vectorised in the rows' own precision, as softmax's backward
    T tq = 0, tgq = 0;
#pragma omp simd reduction(+ : tq, tgq)
    for (int64_t j = 0; j < n; ++j) {
      const T q = std::sqrt(pr[j]);
      out[j] = q;  // kept for the second pass: one square root per entry
      tq += q;
      tgq += q * gr[j];
    }
    const T mean = tq > T(0) ? tgq / tq : T(0);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = out[j] * (gr[j] - mean);
    return 0.0;
  }
  A sq = 0, sgq = 0, sgp = 0, h = 0, sgpl = 0;
  thread_local std::vector<A> qv;  // q of the row, kept for the second pass (one log and one exp per support entry)
  if (int64_t(qv.size()) < n) qv.resize(n);
  A* __restrict q = qv.data();
  for (int64_t j = 0; j < n; ++j) {
    const A p = A(pr[j]);
    q[j] = 0;
    if (p > 0) {
      const A g = A(gr[j]), lp = std::log(p);
      q[j] = std::exp((2.0 - alpha) * lp);  // p^(2 - alpha)
      sq += q[j];
      sgq += q[j] * g;
      sgp += g * p;
      h += p * lp;
      sgpl += g * p * lp;
    }
  }
  const A mean = sq > 0 ? sgq / sq : A(0);
  for (int64_t j = 0; j < n; ++j) out[j] = T(q[j] * (A(gr[j]) - mean));
  const A d = alpha - 1.0;
  if (d <= 0 || sq <= 0) return 0.0;
  return (sgp - mean) / (d * d) - (sgpl - h * mean) / d;
}

// alpha-entmax rows [begin, end): float32 rows by the vectorised path, four at a time; float64 rows by the double one
inline void entmax_alpha_rows(const float* z, float* p, int64_t n, const double* a, int64_t begin, int64_t end) {
  constexpr int R = 4;
  int64_t r = begin;
  for (; r + R <= end; r += R) entmax_alpha_block_f32<R>(z + r * n, p + r * n, n, a + r);
  for (; r < end; ++r) entmax_alpha_block_f32<1>(z + r * n, p + r * n, n, a + r);
}
inline void entmax_alpha_rows(const double* z, double* p, int64_t n, const double* a, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) entmax_alpha_row<double>(z + r * n, p + r * n, n, a[r]);
}
inline double entmax_alpha_backward_row(const float* pr, const float* gr, float* out, int64_t n, double alpha) {
  return entmax_backward_row_f32(pr, gr, out, n, alpha);
}
inline double entmax_alpha_backward_row(const double* pr, const double* gr, double* out, int64_t n, double alpha) {
  return entmax_backward_row<double>(pr, gr, out, n, alpha, false);
}

// alpha: empty (1.5-entmax) or one value per row
torch::Tensor entmax_forward(torch::Tensor z, torch::Tensor alpha) {
  TORCH_CHECK(z.device().is_cpu(), "entmax_forward: CPU tensors only");
  auto zc = z.contiguous();
  auto p = torch::empty_like(zc);
  const int64_t n = zc.size(-1);
  const int64_t rows = n == 0 ? 0 : zc.numel() / n;
  const bool per_row = alpha.numel() > 0;
  auto ac = per_row ? alpha.contiguous().to(torch::kFloat64) : alpha;
  TORCH_CHECK(!per_row || ac.numel() == rows, "entmax_forward: one alpha per row");
  const double* a = per_row ? ac.data_ptr<double>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES(zc.scalar_type(), "entmax_forward", [&] {
    const scalar_t* zp = zc.data_ptr<scalar_t>();
    scalar_t* pp = p.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 16, [=](int64_t begin, int64_t end) {
      int64_t r = begin;
      if (a == nullptr) {
        constexpr int R = 4;
        for (; r + R <= end; r += R) entmax15_block<scalar_t, R>(zp + r * n, pp + r * n, n);
        for (; r < end; ++r) entmax15_block<scalar_t, 1>(zp + r * n, pp + r * n, n);
      } else {
        entmax_alpha_rows(zp, pp, n, a, r, end);
      }
    });
  });
  return p;
}

// (grad_z, grad_alpha per row [rows shape + (1,)], the latter empty for 1.5-entmax)
std::vector<torch::Tensor> entmax_backward(torch::Tensor p, torch::Tensor g, torch::Tensor alpha) {
  TORCH_CHECK(p.device().is_cpu() && g.device().is_cpu(), "entmax_backward: CPU tensors only");
  auto pc = p.contiguous();
  auto gc = g.contiguous().to(pc.scalar_type());
  auto gz = torch::empty_like(pc);
  const int64_t n = pc.size(-1);
  const int64_t rows = n == 0 ? 0 : pc.numel() / n;
  const bool per_row = alpha.numel() > 0;
  auto ac = per_row ? alpha.contiguous().to(torch::kFloat64) : alpha;
  const double* a = per_row ? ac.data_ptr<double>() : nullptr;
  auto ga = per_row ? torch::empty({rows}, pc.options().dtype(torch::kFloat64)) : torch::empty({0}, pc.options().dtype(torch::kFloat64));
  double* gap = per_row ? ga.data_ptr<double>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES(pc.scalar_type(), "entmax_backward", [&] {
    const scalar_t* pp = pc.data_ptr<scalar_t>();
    const scalar_t* gp = gc.data_ptr<scalar_t>();
    scalar_t* op = gz.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 16, [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const double v = a == nullptr ? entmax_backward_row<scalar_t>(pp + r * n, gp + r * n, op + r * n, n, 1.5, true)
                                      : entmax_alpha_backward_row(pp + r * n, gp + r * n, op + r * n, n, a[r]);
        if (gap != nullptr) gap[r] = v;
      }
    });
  });
  if (per_row) {
    auto shape = pc.sizes().vec();
    shape.back() = 1;
    ga = ga.view(shape).to(alpha.scalar_type());
  }
  return {gz, ga};
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
  m.def("entmax_forward", &entmax_forward, "1.5-entmax (alpha empty) or alpha-entmax (one alpha per row) along the last dim (CPU)");
  m.def("entmax_backward", &entmax_backward, "closed-form entmax backward: (grad of the scores, grad of alpha per row) (CPU)");
  m.def("parallel_threads", &parallel_threads, "distinct threads used by the kernels' parallel loop over `rows` rows");
}
