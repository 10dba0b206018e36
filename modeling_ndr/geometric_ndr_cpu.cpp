// The fused CPU kernel of geometric attention (modeling_ndr/geometric_ndr.py builds it on first use with
// torch.utils.cpp_extension.load_inline). One pass per query row: P = sigmoid(z) and 1 - P, then the scan in the
// order i+1, i-1, i+2, i-2, ... as a running product; the backward keeps only the weights and the logits. bfloat16
// tensors are read and written as they are, a row at a time converted to float to compute (no full-size casts).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

using at::vec::Vectorized;

// Logits of query row i for keys j .. j+count-1: content + (key right of i ? right : left).
template <typename scalar_t>
static inline Vectorized<scalar_t> row_logits(const scalar_t* content, int64_t j, int64_t count, int64_t i,
                                              scalar_t left, scalar_t right) {
  using Vec = Vectorized<scalar_t>;
  Vec c = count == Vec::size() ? Vec::loadu(content + j) : Vec::loadu(content + j, count);
  Vec key_is_right = Vec::arange(scalar_t(j), scalar_t(1)) > Vec(scalar_t(i));
  return c + Vec::blendv(Vec(left), Vec(right), key_is_right);
}

template <typename scalar_t>
static inline Vectorized<scalar_t> load(const scalar_t* data, int64_t count) {
  using Vec = Vectorized<scalar_t>;
  return count == Vec::size() ? Vec::loadu(data) : Vec::loadu(data, count);
}

// Rows per parallel chunk: as many as ATen's own element-wise ops take (small tensors stay on one thread, where
// waking the other threads would cost more than the work)
static inline int64_t grain_rows(int64_t n) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1));
}

// The keys of row i in scan order i+1, i-1, i+2, i-2, ...; `visit(j)` is called once per key.
template <typename Visit>
static inline void scan_forward(int64_t i, int64_t n, Visit visit) {
  const int64_t both = std::min(i, n - 1 - i);
  for (int64_t t = 1; t <= both; ++t) {
    visit(i + t);
    visit(i - t);
  }
  for (int64_t r = i + both + 1; r < n; ++r) visit(r);
  for (int64_t l = i - both - 1; l >= 0; --l) visit(l);
}

template <typename Visit>
static inline void scan_backward(int64_t i, int64_t n, Visit visit) {
  const int64_t both = std::min(i, n - 1 - i);
  for (int64_t l = 0; l < i - both; ++l) visit(l);
  for (int64_t r = n - 1; r > i + both; --r) visit(r);
  for (int64_t t = both; t >= 1; --t) {
    visit(i - t);
    visit(i + t);
  }
}

// A row of `n` values of the tensor's type in a buffer of the computing type: the row itself where the two are the
// same (float, double), else a float copy (bfloat16: read as it is, computed in float, written back as bfloat16).
template <typename in_t, typename scalar_t>
struct RowBuffer {
  std::vector<scalar_t> storage;
  explicit RowBuffer(int64_t n) : storage(std::is_same<in_t, scalar_t>::value ? 0 : n) {}
  const scalar_t* read(const in_t* row, int64_t n) {
    if constexpr (std::is_same<in_t, scalar_t>::value) {
      return row;
    } else {
      at::vec::convert(row, storage.data(), n);
      return storage.data();
    }
  }
  scalar_t* target(in_t* row) {
    if constexpr (std::is_same<in_t, scalar_t>::value) {
      return row;
    } else {
      return storage.data();
    }
  }
  void write(in_t* row, int64_t n) {
    if constexpr (!std::is_same<in_t, scalar_t>::value) at::vec::convert(storage.data(), row, n);
  }
};

template <typename in_t, typename scalar_t>
static void forward_rows(const in_t* content, const scalar_t* left, const scalar_t* right,
                         const scalar_t* key_valid, in_t* weights, int64_t rows, int64_t n, int64_t heads) {
  using Vec = Vectorized<scalar_t>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t start, int64_t stop) {
    std::vector<scalar_t> no_match_row(n);
    RowBuffer<in_t, scalar_t> content_row(n), match_row(n);
    scalar_t* no_match = no_match_row.data();
    const scalar_t smallest_normal = std::numeric_limits<scalar_t>::min();
    const Vec zero(0), one(1);
    for (int64_t row = start; row < stop; ++row) {
      const int64_t i = row % n;
      const scalar_t* valid = key_valid ? key_valid + (row / n / heads) * n : nullptr;
      const scalar_t* logits = content_row.read(content + row * n, n);
      scalar_t* match = match_row.target(weights + row * n);  // holds P until the scan turns it into A
      // P = sigmoid(z) and 1 - P = sigmoid(-z) from one exp: e = exp(-|z|); 1 / (1 + e) and e / (1 + e)
      for (int64_t j = 0; j < n; j += Vec::size()) {
        const int64_t count = std::min<int64_t>(Vec::size(), n - j);
        Vec z = row_logits(logits, j, count, i, left[row], right[row]);
        Vec e = (zero - z.abs()).exp();
        Vec large = one / (one + e), small = e * large;
        Vec positive = z >= zero;
        Vec p = Vec::blendv(small, large, positive), q = Vec::blendv(large, small, positive);
        if (valid) {  // a padded key never matches
          Vec is_valid = load(valid + j, count) != zero;
          p = Vec::blendv(zero, p, is_valid);
          q = Vec::blendv(one, q, is_valid);
        }
        p.store(match + j, count);
        q.store(no_match + j, count);
      }
      // A_j = P_j * (product of 1 - P over the keys scanned before j); below the smallest normal number it is 0
      scalar_t none_closer = 1;
      scan_forward(i, n, [&](int64_t j) {
        match[j] *= none_closer;
        none_closer *= no_match[j];
        none_closer = none_closer < smallest_normal ? scalar_t(0) : none_closer;
      });
      match[i] = 0;
      at::vec::map([&](Vec a) { return Vec::blendv(zero, a, a >= Vec(smallest_normal)); }, match, match, n);
      match_row.write(weights + row * n, n);
    }
  });
}

template <typename in_t, typename scalar_t>
static void backward_rows(const in_t* grad, const in_t* weights, const in_t* content, const scalar_t* left,
                          const scalar_t* right, const scalar_t* key_valid, in_t* grad_content,
                          scalar_t* grad_left, scalar_t* grad_right, int64_t rows, int64_t n, int64_t heads) {
  using Vec = Vectorized<scalar_t>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t start, int64_t stop) {
    std::vector<scalar_t> farther_row(n);
    RowBuffer<in_t, scalar_t> grad_row(n), weights_row(n), content_row(n), result_row(n);
    scalar_t* farther_sum = farther_row.data();
    const Vec zero(0), one(1), smallest_normal(std::numeric_limits<scalar_t>::min());
    for (int64_t row = start; row < stop; ++row) {
      const int64_t i = row % n;
      const scalar_t* valid = key_valid ? key_valid + (row / n / heads) * n : nullptr;
      const scalar_t* logits = content_row.read(content + row * n, n);
      scalar_t* gc = result_row.target(grad_content + row * n);
      // w_j = dL/d log A_j = grad_j * A_j (kept in gc until the last pass)
      at::vec::map2([](Vec g, Vec a) { return g * a; }, gc, grad_row.read(grad + row * n, n),
                    weights_row.read(weights + row * n, n), n);
      // dL/d log(1 - P_k) = sum of w over the keys scanned after k
      scalar_t farther = 0;
      scan_backward(i, n, [&](int64_t j) {
        farther_sum[j] = farther;
        farther += gc[j];
      });
      farther_sum[i] = 0;
      // dL/dz = w (1 - sigmoid z) - farther_sum sigmoid z; the diagonal, padded keys and denormals give 0
      Vec left_sum(0), right_sum(0);
      for (int64_t j = 0; j < n; j += Vec::size()) {
        const int64_t count = std::min<int64_t>(Vec::size(), n - j);
        Vec z = row_logits(logits, j, count, i, left[row], right[row]);
        Vec sig = one / (one + (zero - z).exp());
        Vec gz = load(gc + j, count) * (one - sig) - load(farther_sum + j, count) * sig;
        Vec index = Vec::arange(scalar_t(j), scalar_t(1));
        Vec keep = (index != Vec(scalar_t(i))) & (gz.abs() >= smallest_normal);
        if (count < Vec::size()) keep = keep & (Vec::arange(scalar_t(0), scalar_t(1)) < Vec(scalar_t(count)));
        if (valid) keep = keep & (load(valid + j, count) != zero);
        gz = Vec::blendv(zero, gz, keep);
        gz.store(gc + j, count);
        Vec key_is_right = index > Vec(scalar_t(i));
        right_sum = right_sum + Vec::blendv(zero, gz, key_is_right);
        left_sum = left_sum + Vec::blendv(gz, zero, key_is_right);
      }
      auto add = [](Vec x, Vec y) { return x + y; };
      grad_left[row] = at::vec::vec_reduce_all(add, left_sum);
      grad_right[row] = at::vec::vec_reduce_all(add, right_sum);
      result_row.write(grad_content + row * n, n);
    }
  });
}

// content (b, h, n, n) float, double or bfloat16 (read as it is, computed in float, written as bfloat16); left/right
// (b, h, n) and key_valid (b, n) of 0/1 in the computing type (float for bfloat16 content); all contiguous
torch::Tensor geometric_forward(torch::Tensor content, torch::Tensor left, torch::Tensor right,
                                c10::optional<torch::Tensor> key_valid) {
  const int64_t n = content.size(-1), heads = content.size(1), rows = content.numel() / n;
  auto weights = torch::empty_like(content);
  if (content.scalar_type() == at::kBFloat16) {
    const float* valid = key_valid.has_value() ? key_valid->data_ptr<float>() : nullptr;
    forward_rows<at::BFloat16, float>(content.data_ptr<at::BFloat16>(), left.data_ptr<float>(),
                                      right.data_ptr<float>(), valid, weights.data_ptr<at::BFloat16>(), rows, n,
                                      heads);
    return weights;
  }
  AT_DISPATCH_FLOATING_TYPES(content.scalar_type(), "geometric_forward", [&] {
    const scalar_t* valid = key_valid.has_value() ? key_valid->data_ptr<scalar_t>() : nullptr;
    forward_rows<scalar_t, scalar_t>(content.data_ptr<scalar_t>(), left.data_ptr<scalar_t>(),
                                     right.data_ptr<scalar_t>(), valid, weights.data_ptr<scalar_t>(), rows, n, heads);
  });
  return weights;
}

std::vector<torch::Tensor> geometric_backward(torch::Tensor grad, torch::Tensor weights, torch::Tensor content,
                                              torch::Tensor left, torch::Tensor right,
                                              c10::optional<torch::Tensor> key_valid) {
  const int64_t n = content.size(-1), heads = content.size(1), rows = content.numel() / n;
  auto grad_content = torch::empty_like(content);
  auto grad_left = torch::empty_like(left), grad_right = torch::empty_like(right);
  if (content.scalar_type() == at::kBFloat16) {
    const float* valid = key_valid.has_value() ? key_valid->data_ptr<float>() : nullptr;
    backward_rows<at::BFloat16, float>(grad.data_ptr<at::BFloat16>(), weights.data_ptr<at::BFloat16>(),
                                       content.data_ptr<at::BFloat16>(), left.data_ptr<float>(),
                                       right.data_ptr<float>(), valid, grad_content.data_ptr<at::BFloat16>(),
                                       grad_left.data_ptr<float>(), grad_right.data_ptr<float>(), rows, n, heads);
    return {grad_content, grad_left, grad_right};
  }
  AT_DISPATCH_FLOATING_TYPES(content.scalar_type(), "geometric_backward", [&] {
    const scalar_t* valid = key_valid.has_value() ? key_valid->data_ptr<scalar_t>() : nullptr;
    backward_rows<scalar_t, scalar_t>(grad.data_ptr<scalar_t>(), weights.data_ptr<scalar_t>(),
                                      content.data_ptr<scalar_t>(), left.data_ptr<scalar_t>(),
                                      right.data_ptr<scalar_t>(), valid, grad_content.data_ptr<scalar_t>(),
                                      grad_left.data_ptr<scalar_t>(), grad_right.data_ptr<scalar_t>(), rows, n,
                                      heads);
  });
  return {grad_content, grad_left, grad_right};
}
