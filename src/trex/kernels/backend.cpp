#include "trex/kernels/backend.hpp"

#include <exception>
#include <string>
#include <vector>

namespace trex::kernels {

Buffer Backend::allocate(DType dtype, int64_t numel) const {
  if (numel < 0) throw Error("allocate: negative element count").field("numel");
  Buffer buffer;
  buffer.backend_ = this;
  buffer.dtype_ = dtype;
  buffer.numel_ = numel;
  buffer.device_ = device();
  if (numel > 0) {
    buffer.data_ = allocate_bytes(buffer.bytes());
    count_allocated(static_cast<int64_t>(buffer.bytes()));
  }
  return buffer;
}

void Backend::count_allocated(int64_t bytes) const {
  const int64_t live = live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void Backend::fill(const Tensor& x, double value) const {
  if (!x.defined()) throw Error("fill: x is missing").field("x");
  const DType dt = x.dtype();
  if (dt != DType::kF32 && dt != DType::kF64 && dt != DType::kI64 && dt != DType::kI32)
    throw Error(std::string("fill: x is ") + safetensors_name(dt) +
                ", expected F32, F64, I64 or I32")
        .field("x");
  do_fill(x, value);
}

void Backend::copy_from_host(const void* src, const Tensor& dst) const {
  if (!dst.defined()) throw Error("copy_from_host: dst is missing").field("dst");
  if (!src && dst.numel() > 0) throw Error("copy_from_host: src is null").field("src");
  if (dst.numel() > 0) do_copy_from_host(src, dst);
}

void Backend::copy_to_host(const Tensor& src, void* dst) const {
  if (!src.defined()) throw Error("copy_to_host: src is missing").field("src");
  if (!dst && src.numel() > 0) throw Error("copy_to_host: dst is null").field("dst");
  if (src.numel() > 0) do_copy_to_host(src, dst);
}

void Backend::run_independent(int64_t count, const std::function<void(int64_t)>& task) const {
  if (count < 0) throw Error("run_independent: negative task count").field("count");
  // An exception must not leave a worker thread (or a stream callback): each
  // task's is kept and the first in task order rethrown.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(count));
  do_run_independent(count, [&](int64_t i) {
    try {
      task(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                             const LinearOptions& options) const {
  constexpr const char* op = "linear_forward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_tensor(w, op, "w", dt, {-1, x.size(1)});
  expect_tensor(y, op, "y", dt, {x.size(0), w.size(0)});
  do_linear_forward(x, w, y, options);
}

void Backend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& dw, const LinearOptions& options) const {
  constexpr const char* op = "linear_backward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_tensor(w, op, "w", dt, {-1, x.size(1)});
  expect_tensor(dy, op, "dy", dt, {x.size(0), w.size(0)});
  expect_optional(dx, op, "dx", dt, {x.size(0), x.size(1)});
  expect_optional(dw, op, "dw", dt, {w.size(0), w.size(1)});
  do_linear_backward(x, w, dy, dx, dw, options);
}

namespace {

void expect_groups(int64_t groups, const Tensor& x, const Tensor& w, const char* op) {
  if (groups <= 0 || x.size(1) % groups != 0 || w.size(0) % groups != 0)
    throw Error(std::string(op) + ": " + std::to_string(groups) + " groups do not divide x " +
                x.shape_string() + " and w " + w.shape_string())
        .field("groups");
}

}  // namespace

void Backend::grouped_linear_forward(int64_t groups, const Tensor& x, const Tensor& w,
                                     const Tensor& y, Precision precision) const {
  constexpr const char* op = "grouped_linear_forward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_tensor(w, op, "w", dt, {-1, -1});
  expect_groups(groups, x, w, op);
  expect_tensor(w, op, "w", dt, {-1, x.size(1) / groups});
  expect_tensor(y, op, "y", dt, {x.size(0), w.size(0)});
  do_grouped_linear_forward(groups, x, w, y, precision);
}

void Backend::grouped_linear_backward(int64_t groups, const Tensor& x, const Tensor& w,
                                      const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                      Precision precision) const {
  constexpr const char* op = "grouped_linear_backward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_tensor(w, op, "w", dt, {-1, -1});
  expect_groups(groups, x, w, op);
  expect_tensor(w, op, "w", dt, {-1, x.size(1) / groups});
  expect_tensor(dy, op, "dy", dt, {x.size(0), w.size(0)});
  expect_tensor(dx, op, "dx", dt, {x.size(0), x.size(1)});
  expect_optional(dw, op, "dw", dt, {w.size(0), w.size(1)});
  do_grouped_linear_backward(groups, x, w, dy, dx, dw, precision);
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                              const Tensor& inv_rms, double eps) const {
  constexpr const char* op = "rmsnorm_forward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_optional(weight, op, "weight", dt, {x.size(1)});
  expect_tensor(y, op, "y", dt, {x.size(0), x.size(1)});
  expect_optional(inv_rms, op, "inv_rms", dt, {x.size(0)});
  do_rmsnorm_forward(x, weight, y, inv_rms, eps);
}

void Backend::rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& inv_rms,
                               const Tensor& dy, const Tensor& dx, const Tensor& dweight) const {
  constexpr const char* op = "rmsnorm_backward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_optional(weight, op, "weight", dt, {x.size(1)});
  expect_tensor(inv_rms, op, "inv_rms", dt, {x.size(0)});
  expect_tensor(dy, op, "dy", dt, {x.size(0), x.size(1)});
  expect_tensor(dx, op, "dx", dt, {x.size(0), x.size(1)});
  expect_optional(dweight, op, "dweight", dt, {x.size(1)});
  do_rmsnorm_backward(x, weight, inv_rms, dy, dx, dweight);
}

void Backend::rope(const RopeTable& table, const Tensor& x, const Tensor& positions,
                   bool inverse) const {
  constexpr const char* op = "rope";
  expect_float(x, op, "x");
  expect_tensor(x, op, "x", x.dtype(), {-1, -1, -1});
  expect_tensor(positions, op, "positions", DType::kI64, {x.size(0)});
  do_rope(table, x, positions, inverse);
}

namespace {

// The site's parameters (or gradients: optional) for `rows` coefficients.
void expect_site(const MhcSiteTensors& site, const char* op, DType dt, int64_t rows, int64_t width,
                 int64_t scales, bool optional) {
  auto check = optional ? expect_optional : expect_tensor;
  check(site.fn, op, "fn", dt, {rows, width});
  check(site.base, op, "base", dt, {rows});
  check(site.scale, op, "scale", dt, {scales});
}

// The post site's inputs, shared by its forward and backward.
void expect_mhc_post_inputs(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                            const Tensor& X, const Tensor& y, const char* op) {
  validate(dims);
  expect_float(X, op, "X");
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(post, op, "post", dt, {N, n});
  expect_tensor(comb, op, "comb", dt, {N, n, n});
  expect_tensor(X, op, "X", dt, {N, n, d});
  expect_tensor(y, op, "y", dt, {N, d});
}

void expect_state(const MhcStateTensors& state, const char* op, DType dt, const MhcDims& dims,
                  int64_t rows, bool site) {
  const int64_t N = dims.tokens, n = dims.hc_mult;
  expect_tensor(state.inv_rms, op, "inv_rms", dt, {N});
  expect_tensor(state.mix, op, "mix", dt, {N, rows});
  expect_tensor(state.pre, op, "pre", dt, {N, n});
  if (!site) return;
  expect_tensor(state.post, op, "post", dt, {N, n});
  expect_tensor(state.comb, op, "comb", dt, {N, n, n});
}

}  // namespace

void Backend::mhc_pre_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                              const Tensor& u, const MhcStateTensors& state) const {
  constexpr const char* op = "mhc_pre_forward";
  validate(dims);
  expect_float(X, op, "X");
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(X, op, "X", dt, {N, n, d});
  expect_site(weights, op, dt, dims.mix(), n * d, 3, false);
  expect_tensor(u, op, "u", dt, {N, d});
  expect_state(state, op, dt, dims, dims.mix(), true);
  do_mhc_pre_forward(dims, weights, X, u, state);
}

void Backend::mhc_post_forward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                               const Tensor& X, const Tensor& y, const Tensor& Xout) const {
  constexpr const char* op = "mhc_post_forward";
  expect_mhc_post_inputs(dims, post, comb, X, y, op);
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(Xout, op, "Xout", dt, {N, n, d});
  if (N > 0 && Xout.raw() == X.raw())
    throw Error(std::string(op) + ": Xout must not alias X").field("Xout");
  do_mhc_post_forward(dims, post, comb, X, y, Xout);
}

void Backend::mhc_post_backward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                                const Tensor& X, const Tensor& y, const Tensor& dXout,
                                const Tensor& dX, const Tensor& dy, const Tensor& dpost,
                                const Tensor& dcomb) const {
  constexpr const char* op = "mhc_post_backward";
  expect_mhc_post_inputs(dims, post, comb, X, y, op);
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(dXout, op, "dXout", dt, {N, n, d});
  expect_optional(dX, op, "dX", dt, {N, n, d});
  expect_optional(dy, op, "dy", dt, {N, d});
  expect_tensor(dpost, op, "dpost", dt, {N, n});
  expect_tensor(dcomb, op, "dcomb", dt, {N, n, n});
  if (N > 0 && dX.defined() && dX.raw() == dXout.raw())
    throw Error(std::string(op) + ": dX must not alias dXout").field("dX");
  do_mhc_post_backward(dims, post, comb, X, y, dXout, dX, dy, dpost, dcomb);
}

void Backend::mhc_pre_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                               const MhcStateTensors& state, const Tensor& X, const Tensor& du,
                               const Tensor& dpost, const Tensor& dcomb,
                               const MhcSiteTensors& grads, const Tensor& dX) const {
  constexpr const char* op = "mhc_pre_backward";
  validate(dims);
  expect_float(X, op, "X");
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(X, op, "X", dt, {N, n, d});
  expect_site(weights, op, dt, dims.mix(), n * d, 3, false);
  expect_state(state, op, dt, dims, dims.mix(), true);
  expect_tensor(du, op, "du", dt, {N, d});
  expect_tensor(dpost, op, "dpost", dt, {N, n});
  expect_tensor(dcomb, op, "dcomb", dt, {N, n, n});
  expect_site(grads, op, dt, dims.mix(), n * d, 3, true);
  expect_optional(dX, op, "dX", dt, {N, n, d});
  do_mhc_pre_backward(dims, weights, state, X, du, dpost, dcomb, grads, dX);
}

void Backend::hc_head_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                              const Tensor& h, const MhcStateTensors& state) const {
  constexpr const char* op = "hc_head_forward";
  validate(dims);
  expect_float(X, op, "X");
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(X, op, "X", dt, {N, n, d});
  expect_site(weights, op, dt, n, n * d, 1, false);
  expect_tensor(h, op, "h", dt, {N, d});
  expect_state(state, op, dt, dims, n, false);
  do_hc_head_forward(dims, weights, X, h, state);
}

void Backend::hc_head_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                               const MhcStateTensors& state, const Tensor& X, const Tensor& dh,
                               const MhcSiteTensors& grads, const Tensor& dX) const {
  constexpr const char* op = "hc_head_backward";
  validate(dims);
  expect_float(X, op, "X");
  const DType dt = X.dtype();
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
  expect_tensor(X, op, "X", dt, {N, n, d});
  expect_site(weights, op, dt, n, n * d, 1, false);
  expect_state(state, op, dt, dims, n, false);
  expect_tensor(dh, op, "dh", dt, {N, d});
  expect_site(grads, op, dt, n, n * d, 1, true);
  expect_optional(dX, op, "dX", dt, {N, n, d});
  do_hc_head_backward(dims, weights, state, X, dh, grads, dX);
}

namespace {

// Sinkhorn's logits: a float [n, n] with n > 0, and at least one iteration; returns n.
int64_t expect_sinkhorn_logits(const Tensor& logits, int64_t iters, const char* op) {
  expect_float(logits, op, "logits");
  expect_tensor(logits, op, "logits", logits.dtype(), {-1, -1});
  const int64_t n = logits.size(0);
  if (n <= 0) throw Error("sinkhorn: n must be > 0").field("hc_mult");
  if (iters < 1) throw Error("sinkhorn: iterations must be >= 1").field("hc_sinkhorn_iters");
  expect_tensor(logits, op, "logits", logits.dtype(), {n, n});
  return n;
}

}  // namespace

void Backend::sinkhorn_forward(const Tensor& logits, int64_t iters, double eps,
                               const Tensor& comb) const {
  constexpr const char* op = "sinkhorn_forward";
  const int64_t n = expect_sinkhorn_logits(logits, iters, op);
  expect_tensor(comb, op, "comb", logits.dtype(), {n, n});
  do_sinkhorn_forward(logits, iters, eps, comb);
}

void Backend::sinkhorn_backward(const Tensor& logits, int64_t iters, double eps,
                                const Tensor& dcomb, const Tensor& dlogits) const {
  constexpr const char* op = "sinkhorn_backward";
  const int64_t n = expect_sinkhorn_logits(logits, iters, op);
  expect_tensor(dcomb, op, "dcomb", logits.dtype(), {n, n});
  expect_tensor(dlogits, op, "dlogits", logits.dtype(), {n, n});
  do_sinkhorn_backward(logits, iters, eps, dcomb, dlogits);
}

void Backend::scale(const Tensor& x, double factor) const {
  expect_float(x, "scale", "x");
  do_scale(x, factor);
}

namespace {

// [M, w] or [M, k, w] as (M, k, w).
struct Rows {
  int64_t M, k, w;
};

Rows rows_of(const Tensor& t, const char* op, const char* name) {
  if (t.rank() == 2) return {t.size(0), 1, t.size(1)};
  if (t.rank() == 3) return {t.size(0), t.size(1), t.size(2)};
  throw Error(std::string(op) + ": " + name + " is " + t.shape_string() +
              ", expected [M, w] or [M, k, w]")
      .field(name);
}

}  // namespace

void Backend::add(const Tensor& x, const Tensor& y) const {
  expect_float(x, "add", "x");
  expect_float(y, "add", "y");
  if (x.dtype() != y.dtype() || x.numel() != y.numel())
    throw Error("add: y is " + std::string(safetensors_name(y.dtype())) + " " + y.shape_string() +
                ", x is " + safetensors_name(x.dtype()) + " " + x.shape_string())
        .field("y");
  do_add(x, y);
}

void Backend::copy(const Tensor& src, const Tensor& dst) const {
  expect_float(src, "copy", "src");
  expect_float(dst, "copy", "dst");
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    throw Error("copy: dst is " + std::string(safetensors_name(dst.dtype())) + " " +
                dst.shape_string() + ", src is " + safetensors_name(src.dtype()) + " " +
                src.shape_string())
        .field("dst");
  do_copy(src, dst);
}

void Backend::gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const {
  constexpr const char* op = "gather_rows";
  expect_float(dst, op, "dst");
  // A bf16 table (2-byte parameter storage) gathers into fp32 rows.
  const bool bf16_table = src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32;
  if (!bf16_table) expect_float(src, op, "src");
  expect_tensor(src, op, "src", src.dtype(), {-1, -1});
  const Rows d = rows_of(dst, op, "dst");
  if (d.w != src.size(1) || (dst.dtype() != src.dtype() && !bf16_table))
    throw Error(std::string(op) + ": dst " + dst.shape_string() + " does not take rows of src " +
                src.shape_string())
        .field("dst");
  expect_tensor(index, op, "index", DType::kI64, {d.M});
  do_gather_rows(src, index, dst);
}

void Backend::scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const {
  constexpr const char* op = "scatter_add_rows";
  expect_float(src, op, "src");
  const Rows s = rows_of(src, op, "src");
  expect_tensor(dst, op, "dst", src.dtype(), {-1, s.w});
  expect_tensor(index, op, "index", DType::kI64, {s.M});
  do_scatter_add_rows(src, index, dst);
}

void Backend::broadcast_add(const Tensor& y, const Tensor& x) const {
  constexpr const char* op = "broadcast_add";
  expect_float(x, op, "x");
  expect_tensor(x, op, "x", x.dtype(), {-1, -1, -1});
  expect_tensor(y, op, "y", x.dtype(), {x.size(0), x.size(2)});
  do_broadcast_add(y, x);
}

void Backend::sum_copies_add(const Tensor& x, const Tensor& y) const {
  constexpr const char* op = "sum_copies_add";
  expect_float(x, op, "x");
  expect_tensor(x, op, "x", x.dtype(), {-1, -1, -1});
  expect_tensor(y, op, "y", x.dtype(), {x.size(0), x.size(2)});
  do_sum_copies_add(x, y);
}

void Backend::sequence_positions(const Tensor& positions, int64_t period, int64_t stride) const {
  expect_tensor(positions, "sequence_positions", "positions", DType::kI64, {-1});
  if (period <= 0) throw Error("sequence_positions: period must be positive").field("period");
  do_sequence_positions(positions, period, stride);
}

namespace {

void expect_index(const Tensor& index, const char* op, const char* name, bool i64_allowed) {
  if (!index.defined()) throw Error(std::string(op) + ": " + name + " is missing").field(name);
  const bool ok = index.dtype() == DType::kI32 || (i64_allowed && index.dtype() == DType::kI64);
  if (!ok || index.rank() != 1)
    throw Error(std::string(op) + ": " + name + " is " + safetensors_name(index.dtype()) + " " +
                index.shape_string() + ", expected " + (i64_allowed ? "I64 or I32" : "I32") +
                " [n]")
        .field(name);
}

}  // namespace

IndexScan Backend::scan_indices(const Tensor& index, int64_t lo, int64_t hi) const {
  expect_index(index, "scan_indices", "index", true);
  if (hi < 0 || lo > hi) throw Error("scan_indices: [lo, hi) is not a range").field("hi");
  return do_scan_indices(index, lo, hi);
}

void Backend::count_indices(const Tensor& index, const Tensor& counts) const {
  expect_index(index, "count_indices", "index", false);
  expect_tensor(counts, "count_indices", "counts", DType::kI64, {-1});
  do_count_indices(index, counts);
}

void Backend::counting_sort(const Tensor& keys, const Tensor& offsets, const Tensor& order,
                            const Tensor& rank) const {
  constexpr const char* op = "counting_sort";
  expect_index(keys, op, "keys", false);
  expect_tensor(offsets, op, "offsets", DType::kI64, {-1});
  if (offsets.size(0) < 1)
    throw Error("counting_sort: offsets needs E+1 >= 1 entries").field("offsets");
  expect_tensor(order, op, "order", DType::kI64, {keys.size(0)});
  expect_tensor(rank, op, "rank", DType::kI64, {keys.size(0)});
  do_counting_sort(keys, offsets, order, rank);
}

namespace {

// The key-set dims and the optional selection of N query rows.
int64_t expect_key_set_inputs(const AttentionKeySetDims& dims, const Tensor& selected,
                              const Tensor& comp_offsets, const char* op) {
  expect_tensor(comp_offsets, op, "comp_offsets", DType::kI64, {-1});
  const int64_t N = comp_offsets.size(0) - 1;
  if (N < 0 || dims.core.seq <= 0 || N % dims.core.seq != 0 || dims.core.window <= 0 ||
      dims.heads <= 0)
    throw Error(std::string(op) + ": " + std::to_string(N) + " rows are not sequences of " +
                std::to_string(dims.core.seq) + " with a positive window and heads")
        .field("dims");
  if (dims.compressed && (dims.ratio <= 0 || dims.blocks < 0))
    throw Error(std::string(op) + ": compressed keys need ratio > 0 and blocks >= 0").field("dims");
  if (selected.defined() && !dims.compressed)
    throw Error(std::string(op) + ": a selection without compressed keys").field("selected");
  expect_optional(selected, op, "selected", DType::kI64, {N, -1});
  return N;
}

}  // namespace

int64_t Backend::first_invisible_selection(const AttentionKeySetDims& dims,
                                           const Tensor& selected) const {
  constexpr const char* op = "first_invisible_selection";
  expect_tensor(selected, op, "selected", DType::kI64, {-1, -1});
  if (dims.core.seq <= 0 || selected.size(0) % dims.core.seq != 0 || !dims.compressed ||
      dims.ratio <= 0)
    throw Error(std::string(op) + ": " + std::to_string(selected.size(0)) +
                " rows are not sequences of " + std::to_string(dims.core.seq) +
                " over compressed keys")
        .field("dims");
  return do_first_invisible_selection(dims, selected);
}

AttentionKeySetSizes Backend::attention_key_offsets(const AttentionKeySetDims& dims,
                                                    const Tensor& selected,
                                                    const Tensor& comp_offsets,
                                                    const Tensor& prob_offsets) const {
  constexpr const char* op = "attention_key_offsets";
  const int64_t N = expect_key_set_inputs(dims, selected, comp_offsets, op);
  expect_tensor(prob_offsets, op, "prob_offsets", DType::kI64, {N + 1});
  return do_attention_key_offsets(dims, selected, comp_offsets, prob_offsets);
}

void Backend::attention_compressed_keys(const AttentionKeySetDims& dims, const Tensor& selected,
                                        const Tensor& comp_offsets, const Tensor& comp_list) const {
  constexpr const char* op = "attention_compressed_keys";
  expect_key_set_inputs(dims, selected, comp_offsets, op);
  expect_tensor(comp_list, op, "comp_list", DType::kI64, {-1});
  do_attention_compressed_keys(dims, selected, comp_offsets, comp_list);
}

namespace {

// q [N, H, c] and the key sets of its N queries; returns the compressed entries E.
int64_t expect_attention_keys(const AttentionCoreDims& dims, const Tensor& q,
                              const AttentionKeyTensors& keys, const char* op) {
  expect_float(q, op, "q");
  const DType dt = q.dtype();
  expect_tensor(q, op, "q", dt, {-1, -1, -1});
  const int64_t N = q.size(0), c = q.size(2);
  if (dims.seq <= 0 || N % dims.seq != 0 || dims.window <= 0)
    throw Error(std::string(op) + ": " + std::to_string(N) + " rows are not sequences of " +
                std::to_string(dims.seq) + " with a positive window")
        .field("dims");
  expect_tensor(keys.kv, op, "kv", dt, {N, c});
  expect_tensor(keys.compressed, op, "compressed", dt, {-1, c});
  expect_tensor(keys.comp_offsets, op, "comp_offsets", DType::kI64, {N + 1});
  expect_tensor(keys.comp_list, op, "comp_list", DType::kI64, {-1});
  expect_tensor(keys.prob_offsets, op, "prob_offsets", DType::kI64, {N + 1});
  return keys.compressed.size(0);
}

}  // namespace

void Backend::attention_core_forward(const AttentionCoreDims& dims, const Tensor& q,
                                     const AttentionKeyTensors& keys, const Tensor& sink,
                                     const Tensor& prob, const Tensor& sink_prob,
                                     const Tensor& o) const {
  constexpr const char* op = "attention_core_forward";
  expect_attention_keys(dims, q, keys, op);
  const DType dt = q.dtype();
  const int64_t N = q.size(0), H = q.size(1), c = q.size(2);
  expect_tensor(sink, op, "sink", dt, {H});
  expect_tensor(prob, op, "prob", dt, {-1});  // length: check_attention_probabilities
  expect_tensor(sink_prob, op, "sink_prob", dt, {N, H});
  expect_tensor(o, op, "o", dt, {N, H, c});
  do_attention_core_forward(dims, q, keys, sink, prob, sink_prob, o);
}

void Backend::attention_core_backward(const AttentionCoreDims& dims, const Tensor& q,
                                      const AttentionKeyTensors& keys, const Tensor& prob,
                                      const Tensor& sink_prob, const Tensor& o, const Tensor& d_o,
                                      const Tensor& dq, const Tensor& dkv,
                                      const Tensor& dcompressed, const Tensor& dsink) const {
  constexpr const char* op = "attention_core_backward";
  const int64_t E = expect_attention_keys(dims, q, keys, op);
  const DType dt = q.dtype();
  const int64_t N = q.size(0), H = q.size(1), c = q.size(2);
  expect_tensor(prob, op, "prob", dt, {-1});  // length: check_attention_probabilities
  expect_tensor(sink_prob, op, "sink_prob", dt, {N, H});
  expect_tensor(o, op, "o", dt, {N, H, c});
  expect_tensor(d_o, op, "d_o", dt, {N, H, c});
  expect_tensor(dq, op, "dq", dt, {N, H, c});
  expect_tensor(dkv, op, "dkv", dt, {N, c});
  expect_tensor(dcompressed, op, "dcompressed", dt, {E, c});
  expect_optional(dsink, op, "dsink", dt, {H});
  do_attention_core_backward(dims, q, keys, prob, sink_prob, o, d_o, dq, dkv, dcompressed, dsink);
}

void Backend::attention_selected_mass(const AttentionCoreDims& dims, int64_t heads,
                                      const Tensor& prob, const Tensor& prob_offsets,
                                      const Tensor& comp_offsets, const Tensor& selected,
                                      const Tensor& target) const {
  constexpr const char* op = "attention_selected_mass";
  expect_float(prob, op, "prob");
  expect_tensor(prob, op, "prob", prob.dtype(), {-1});
  expect_tensor(selected, op, "selected", DType::kI64, {-1, -1});
  const int64_t N = selected.size(0), k = selected.size(1);
  if (dims.seq <= 0 || N % dims.seq != 0 || heads <= 0)
    throw Error(std::string(op) + ": bad sequence length or head count").field("dims");
  expect_tensor(prob_offsets, op, "prob_offsets", DType::kI64, {N + 1});
  expect_tensor(comp_offsets, op, "comp_offsets", DType::kI64, {N + 1});
  expect_tensor(target, op, "target", prob.dtype(), {N, k});
  do_attention_selected_mass(dims, heads, prob, prob_offsets, comp_offsets, selected, target);
}

void Backend::compressor_pool_forward(const CompressorPoolDims& dims, const Tensor& gate,
                                      const Tensor& proj, const Tensor& ape, const Tensor& prob,
                                      const Tensor& pooled) const {
  constexpr const char* op = "compressor_pool_forward";
  if (dims.batch < 0 || dims.seq < 0 || dims.ratio <= 0 || dims.out_dim <= 0)
    throw Error(std::string(op) + ": bad pooling dims").field("dims");
  expect_float(gate, op, "gate");
  const DType dt = gate.dtype();
  const int64_t tokens = dims.batch * dims.seq, W = dims.width(), E = dims.entries();
  expect_tensor(gate, op, "gate", dt, {tokens, W});
  expect_tensor(proj, op, "proj", dt, {tokens, W});
  expect_tensor(ape, op, "ape", dt, {dims.ratio, W});
  expect_tensor(prob, op, "prob", dt, {E, dims.slots(), dims.out_dim});
  expect_tensor(pooled, op, "pooled", dt, {E, dims.out_dim});
  do_compressor_pool_forward(dims, gate, proj, ape, prob, pooled);
}

void Backend::compressor_pool_backward(const CompressorPoolDims& dims, const Tensor& prob,
                                       const Tensor& proj, const Tensor& pooled,
                                       const Tensor& dpooled, const Tensor& dproj,
                                       const Tensor& dgate, const Tensor& dape) const {
  constexpr const char* op = "compressor_pool_backward";
  if (dims.batch < 0 || dims.seq < 0 || dims.ratio <= 0 || dims.out_dim <= 0)
    throw Error(std::string(op) + ": bad pooling dims").field("dims");
  expect_float(prob, op, "prob");
  const DType dt = prob.dtype();
  const int64_t tokens = dims.batch * dims.seq, W = dims.width(), E = dims.entries();
  expect_tensor(prob, op, "prob", dt, {E, dims.slots(), dims.out_dim});
  expect_tensor(proj, op, "proj", dt, {tokens, W});
  expect_tensor(pooled, op, "pooled", dt, {E, dims.out_dim});
  expect_tensor(dpooled, op, "dpooled", dt, {E, dims.out_dim});
  expect_tensor(dproj, op, "dproj", dt, {tokens, W});
  expect_tensor(dgate, op, "dgate", dt, {tokens, W});
  expect_optional(dape, op, "dape", dt, {dims.ratio, W});
  do_compressor_pool_backward(dims, prob, proj, pooled, dpooled, dproj, dgate, dape);
}

namespace {

// The scoring inputs of T tokens; returns T.
int64_t expect_indexer_inputs(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                              const Tensor& selected, const char* op) {
  expect_float(in.q, op, "q");
  const DType dt = in.q.dtype();
  expect_tensor(in.q, op, "q", dt, {-1, -1, -1});
  const int64_t T = in.q.size(0), heads = in.q.size(1), hd = in.q.size(2);
  if (dims.seq <= 0 || T % dims.seq != 0 || dims.ratio <= 0 || dims.blocks < 0 || dims.topk <= 0)
    throw Error(std::string(op) + ": bad indexer dims").field("dims");
  expect_tensor(in.head_weights, op, "head_weights", dt, {T, heads});
  expect_tensor(in.keys, op, "keys", dt, {T / dims.seq * dims.blocks, hd});
  expect_tensor(selected, op, "selected", DType::kI64, {T, dims.topk});
  return T;
}

}  // namespace

void Backend::indexer_select(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                             const Tensor& selected,
                             std::vector<SelectionBoundary>* boundaries) const {
  expect_indexer_inputs(dims, in, selected, "indexer_select");
  do_indexer_select(dims, in, selected, boundaries);
}

void Backend::indexer_selected_scores(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                                      const Tensor& selected, const Tensor& scores) const {
  constexpr const char* op = "indexer_selected_scores";
  const int64_t T = expect_indexer_inputs(dims, in, selected, op);
  expect_tensor(scores, op, "scores", in.q.dtype(), {T, dims.topk});
  do_indexer_selected_scores(dims, in, selected, scores);
}

double Backend::indexer_kl_loss(const Tensor& selected, const Tensor& scores, const Tensor& target,
                                const Tensor& dscores) const {
  constexpr const char* op = "indexer_kl_loss";
  expect_tensor(selected, op, "selected", DType::kI64, {-1, -1});
  const int64_t T = selected.size(0), k = selected.size(1);
  expect_float(scores, op, "scores");
  const DType dt = scores.dtype();
  expect_tensor(scores, op, "scores", dt, {T, k});
  expect_tensor(target, op, "target", dt, {T, k});
  expect_tensor(dscores, op, "dscores", dt, {T, k});
  return do_indexer_kl_loss(selected, scores, target, dscores);
}

void Backend::indexer_score_backward(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                                     const Tensor& selected, const Tensor& dscores, double scale,
                                     const Tensor& dq, const Tensor& dweights,
                                     const Tensor& dkeys) const {
  constexpr const char* op = "indexer_score_backward";
  const int64_t T = expect_indexer_inputs(dims, in, selected, op);
  const DType dt = in.q.dtype();
  expect_tensor(dscores, op, "dscores", dt, {T, dims.topk});
  expect_tensor(dq, op, "dq", dt, {T, in.q.size(1), in.q.size(2)});
  expect_tensor(dweights, op, "dweights", dt, {T, in.q.size(1)});
  expect_tensor(dkeys, op, "dkeys", dt, {in.keys.size(0), in.q.size(2)});
  do_indexer_score_backward(dims, in, selected, dscores, scale, dq, dweights, dkeys);
}

double Backend::lm_head_cross_entropy(const Tensor& h, const Tensor& head, const Tensor& targets,
                                      const Tensor& token_weights, double loss_scale,
                                      const LmHeadOutputs& outputs, int64_t chunk_rows,
                                      Precision precision) const {
  constexpr const char* op = "lm_head_cross_entropy";
  expect_float(h, op, "h");
  const DType dt = h.dtype();
  expect_tensor(h, op, "h", dt, {-1, -1});
  const int64_t N = h.size(0), d = h.size(1);
  expect_tensor(head, op, "head", dt, {-1, d});
  const int64_t V = head.size(0);
  if (targets.defined() && targets.dtype() == DType::kI32)
    expect_tensor(targets, op, "targets", DType::kI32, {N});
  else
    expect_tensor(targets, op, "targets", DType::kI64, {N});
  expect_optional(token_weights, op, "token_weights", dt, {N});
  expect_optional(outputs.dh, op, "dh", dt, {N, d});
  expect_optional(outputs.dhead, op, "dhead", dt, {V, d});
  expect_optional(outputs.per_token_loss, op, "per_token_loss", dt, {N});
  expect_optional(outputs.logits, op, "logits", dt, {N, V});
  if (chunk_rows < 0)
    throw Error(std::string(op) + ": chunk_rows must be >= 0").field("chunk_rows");
  return do_lm_head_cross_entropy(h, head, targets, token_weights, loss_scale, outputs, chunk_rows,
                                  precision);
}

namespace {

// Balance sequences I64 [B, 2] (first row, length); their contents:
// check_balance_sequences.
void expect_sequences(const Tensor& sequences, const char* op) {
  expect_tensor(sequences, op, "sequences", DType::kI64, {-1, 2});
}

}  // namespace

void Backend::router_scores(const Tensor& logits, const Tensor& scores) const {
  constexpr const char* op = "router_scores";
  expect_float(logits, op, "logits");
  expect_tensor(logits, op, "logits", logits.dtype(), {-1, -1});
  expect_tensor(scores, op, "scores", logits.dtype(), {logits.size(0), logits.size(1)});
  do_router_scores(logits, scores);
}

void Backend::router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                            const Tensor& tid2eid, const Tensor& expert_index) const {
  constexpr const char* op = "router_select";
  expect_float(scores, op, "scores");
  const DType dt = scores.dtype();
  expect_tensor(scores, op, "scores", dt, {-1, -1});
  const int64_t N = scores.size(0), E = scores.size(1);
  expect_optional(bias, op, "bias", dt, {E});
  expect_tensor(expert_index, op, "expert_index", DType::kI32, {N, -1});
  const int64_t K = expert_index.size(1);
  if (tid2eid.defined()) {
    expect_tensor(tid2eid, op, "tid2eid", DType::kI64, {-1, K});
    expect_tensor(token_ids, op, "token_ids", DType::kI64, {N});
  } else {
    expect_optional(token_ids, op, "token_ids", DType::kI64, {N});
    if (K > E)
      throw Error(std::string(op) + ": top " + std::to_string(K) + " of " + std::to_string(E) +
                  " experts")
          .field("expert_index");
  }
  do_router_select(scores, bias, token_ids, tid2eid, expert_index);
}

void Backend::router_combine(const RouterCombineParams& params, const Tensor& scores,
                             const Tensor& expert_index, const Tensor& combine) const {
  constexpr const char* op = "router_combine";
  expect_float(scores, op, "scores");
  expect_tensor(scores, op, "scores", scores.dtype(), {-1, -1});
  expect_tensor(expert_index, op, "expert_index", DType::kI32, {scores.size(0), -1});
  expect_tensor(combine, op, "combine", scores.dtype(), {scores.size(0), expert_index.size(1)});
  do_router_combine(params, scores, expert_index, combine);
}

void Backend::router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                         const Tensor& freq) const {
  constexpr const char* op = "router_balance_frequencies";
  expect_tensor(expert_index, op, "expert_index", DType::kI32, {-1, -1});
  expect_sequences(sequences, op);
  expect_tensor(freq, op, "freq", DType::kF64, {sequences.size(0), -1});
  do_router_balance_frequencies(expert_index, sequences, freq);
}

double Backend::router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                                    const Tensor& sequences) const {
  constexpr const char* op = "router_balance_loss";
  expect_float(scores, op, "scores");
  expect_tensor(scores, op, "scores", scores.dtype(), {-1, -1});
  expect_sequences(sequences, op);
  expect_tensor(freq, op, "freq", DType::kF64, {sequences.size(0), scores.size(1)});
  return do_router_balance_loss(weight, scores, freq, sequences);
}

void Backend::router_backward(const RouterCombineParams& params, const RouterBalanceGrad& balance,
                              const Tensor& logits, const Tensor& scores,
                              const Tensor& expert_index, const Tensor& combine,
                              const Tensor& d_combine, int64_t begin, int64_t end,
                              const Tensor& dlogits) const {
  constexpr const char* op = "router_backward";
  expect_float(scores, op, "scores");
  const DType dt = scores.dtype();
  expect_tensor(scores, op, "scores", dt, {-1, -1});
  const int64_t N = scores.size(0), E = scores.size(1);
  expect_tensor(logits, op, "logits", dt, {N, E});
  expect_tensor(expert_index, op, "expert_index", DType::kI32, {N, -1});
  const int64_t K = expert_index.size(1);
  expect_tensor(combine, op, "combine", dt, {N, K});
  expect_tensor(d_combine, op, "d_combine", dt, {N, K});
  expect_tensor(dlogits, op, "dlogits", dt, {N, E});
  if (begin < 0 || begin > end || end > N)
    throw Error(std::string(op) + ": tokens [" + std::to_string(begin) + ", " +
                std::to_string(end) + ") are not inside the " + std::to_string(N) + " tokens")
        .field("tokens");
  if (balance.sequences.defined()) {
    expect_sequences(balance.sequences, op);
    expect_tensor(balance.freq, op, "freq", DType::kF64, {balance.sequences.size(0), E});
    expect_tensor(balance.sequence_of, op, "sequence_of", DType::kI64, {N});
  } else if (balance.freq.defined() || balance.sequence_of.defined()) {
    throw Error(std::string(op) + ": balance-loss tensors without their sequences")
        .field("sequences");
  }
  do_router_backward(params, balance, logits, scores, expert_index, combine, d_combine, begin, end,
                     dlogits);
}

void Backend::router_bias_update(const Tensor& bias, const Tensor& load, double speed) const {
  constexpr const char* op = "router_bias_update";
  expect_float(bias, op, "bias");
  expect_tensor(bias, op, "bias", bias.dtype(), {-1});
  expect_tensor(load, op, "load", DType::kI64, {bias.size(0)});
  do_router_bias_update(bias, load, speed);
}

void Backend::swiglu_forward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                             double limit, const Tensor& h) const {
  constexpr const char* op = "swiglu_forward";
  expect_float(gate_pre, op, "gate_pre");
  const DType dt = gate_pre.dtype();
  expect_tensor(gate_pre, op, "gate_pre", dt, {-1, -1});
  const int64_t R = gate_pre.size(0), I = gate_pre.size(1);
  expect_tensor(up_pre, op, "up_pre", dt, {R, I});
  expect_optional(row_scale, op, "row_scale", dt, {R});
  expect_tensor(h, op, "h", dt, {R, I});
  do_swiglu_forward(gate_pre, up_pre, row_scale, limit, h);
}

void Backend::swiglu_backward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                              const Tensor& dh, double limit, const Tensor& dg, const Tensor& dv,
                              const Tensor& d_row_scale) const {
  constexpr const char* op = "swiglu_backward";
  expect_float(gate_pre, op, "gate_pre");
  const DType dt = gate_pre.dtype();
  expect_tensor(gate_pre, op, "gate_pre", dt, {-1, -1});
  const int64_t R = gate_pre.size(0), I = gate_pre.size(1);
  expect_tensor(up_pre, op, "up_pre", dt, {R, I});
  expect_optional(row_scale, op, "row_scale", dt, {R});
  expect_tensor(dh, op, "dh", dt, {R, I});
  expect_tensor(dg, op, "dg", dt, {R, I});
  expect_tensor(dv, op, "dv", dt, {R, I});
  expect_optional(d_row_scale, op, "d_row_scale", dt, {R});
  do_swiglu_backward(gate_pre, up_pre, row_scale, dh, limit, dg, dv, d_row_scale);
}

namespace {

// offsets I64 [G+1] (their contents: check_row_groups); w has G entries,
// each [N, K] or undefined (a group without rows). Returns G.
int64_t expect_row_groups(const Tensor& offsets, std::span<const Tensor> w, DType dt, int64_t N,
                          int64_t K, const char* op) {
  expect_tensor(offsets, op, "offsets", DType::kI64, {-1});
  const int64_t G = offsets.size(0) - 1;
  if (G < 0 || static_cast<int64_t>(w.size()) != G)
    throw Error(std::string(op) + ": " + std::to_string(w.size()) + " weights for " +
                std::to_string(G) + " groups")
        .field("w");
  for (int64_t g = 0; g < G; ++g) {
    const std::string name = "w[" + std::to_string(g) + "]";
    expect_optional(w[static_cast<size_t>(g)], op, name.c_str(), dt, {N, K});
  }
  return G;
}

}  // namespace

void Backend::grouped_linear_forward(const Tensor& offsets, const Tensor& x,
                                     std::span<const Tensor> w, const Tensor& y,
                                     Precision precision) const {
  constexpr const char* op = "grouped_linear_forward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  expect_tensor(y, op, "y", dt, {x.size(0), -1});
  expect_row_groups(offsets, w, dt, y.size(1), x.size(1), op);
  do_grouped_rows_linear_forward(offsets, x, w, y, precision);
}

void Backend::grouped_linear_backward(const Tensor& offsets, const Tensor& x,
                                      std::span<const Tensor> w, const Tensor& dy, const Tensor& dx,
                                      std::span<const Tensor> dw,
                                      const LinearOptions& options) const {
  constexpr const char* op = "grouped_linear_backward";
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  const int64_t R = x.size(0), K = x.size(1);
  expect_tensor(dy, op, "dy", dt, {R, -1});
  const int64_t N = dy.size(1);
  const int64_t G = expect_row_groups(offsets, w, dt, N, K, op);
  expect_optional(dx, op, "dx", dt, {R, K});
  if (!dw.empty() && static_cast<int64_t>(dw.size()) != G)
    throw Error(std::string(op) + ": " + std::to_string(dw.size()) + " weight gradients for " +
                std::to_string(G) + " groups")
        .field("dw");
  for (size_t g = 0; g < dw.size(); ++g) {
    const std::string name = "dw[" + std::to_string(g) + "]";
    expect_optional(dw[g], op, name.c_str(), dt, {N, K});
  }
  do_grouped_rows_linear_backward(offsets, x, w, dy, dx, dw, options);
}

void Backend::moe_permute(int64_t top_k, const Tensor& x, const Tensor& pair_order,
                          const Tensor& combine, const Tensor& rows,
                          const Tensor& row_combine) const {
  constexpr const char* op = "moe_permute";
  if (top_k <= 0) throw Error(std::string(op) + ": top_k must be positive").field("top_k");
  expect_float(x, op, "x");
  const DType dt = x.dtype();
  expect_tensor(x, op, "x", dt, {-1, -1});
  const int64_t N = x.size(0), d = x.size(1), P = N * top_k;
  expect_tensor(pair_order, op, "pair_order", DType::kI64, {P});
  expect_optional(combine, op, "combine", dt, {N, top_k});
  const bool with_weight_column = rows.defined() && rows.rank() == 2 && rows.size(1) == d + 1;
  expect_tensor(rows, op, "rows", dt, {P, with_weight_column ? d + 1 : d});
  expect_optional(row_combine, op, "row_combine", dt, {P});
  if (combine.defined() != (with_weight_column || row_combine.defined()) ||
      (with_weight_column && row_combine.defined()))
    throw Error(std::string(op) +
                ": combine needs exactly one destination (row_combine, or rows of d+1 columns)")
        .field("combine");
  do_moe_permute(top_k, x, pair_order, combine, rows, row_combine);
}

void Backend::moe_unpermute(const Tensor& rows, const Tensor& pair_row, const Tensor& y) const {
  constexpr const char* op = "moe_unpermute";
  expect_float(rows, op, "rows");
  expect_tensor(rows, op, "rows", rows.dtype(), {-1, -1});
  expect_tensor(pair_row, op, "pair_row", DType::kI64, {-1, -1});
  expect_tensor(y, op, "y", rows.dtype(), {pair_row.size(0), rows.size(1)});
  do_moe_unpermute(rows, pair_row, y);
}

namespace {

// packed [M, d] or [M, d+1] against rows [R, d]; weights [R] exactly with d+1 columns.
void expect_packed(const Tensor& rows, const Tensor& weights, const Tensor& packed, int64_t M,
                   const char* op) {
  const DType dt = rows.dtype();
  const int64_t d = rows.size(1);
  const bool with_weight_column = packed.defined() && packed.rank() == 2 && packed.size(1) == d + 1;
  expect_tensor(packed, op, "packed", dt, {M, with_weight_column ? d + 1 : d});
  if (with_weight_column)
    expect_tensor(weights, op, "weights", dt, {rows.size(0)});
  else if (weights.defined())
    throw Error(std::string(op) + ": weights need packed rows of d+1 columns").field("weights");
}

}  // namespace

void Backend::pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                        const Tensor& packed) const {
  constexpr const char* op = "pack_rows";
  expect_float(rows, op, "rows");
  expect_tensor(rows, op, "rows", rows.dtype(), {-1, -1});
  expect_tensor(index, op, "index", DType::kI64, {-1});
  expect_packed(rows, weights, packed, index.size(0), op);
  do_pack_rows(rows, weights, index, packed);
}

void Backend::unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                          const Tensor& weights) const {
  constexpr const char* op = "unpack_rows";
  expect_float(rows, op, "rows");
  expect_tensor(rows, op, "rows", rows.dtype(), {-1, -1});
  expect_tensor(packed, op, "packed", rows.dtype(), {-1, -1});
  const int64_t M = packed.size(0);
  if (index.defined())
    expect_tensor(index, op, "index", DType::kI64, {M});
  else if (M > rows.size(0))
    throw Error(std::string(op) + ": " + std::to_string(M) + " packed rows for rows " +
                rows.shape_string())
        .field("rows");
  expect_packed(rows, weights, packed, M, op);
  do_unpack_rows(packed, index, rows, weights);
}

void Backend::decode_indexer_select(const Tensor& q, const Tensor& head_weights, const Tensor& keys,
                                    const Tensor& selected) const {
  constexpr const char* op = "decode_indexer_select";
  expect_float(q, op, "q");
  const DType dt = q.dtype();
  expect_tensor(q, op, "q", dt, {-1, -1});
  expect_tensor(head_weights, op, "head_weights", dt, {q.size(0)});
  expect_tensor(keys, op, "keys", dt, {-1, q.size(1)});
  expect_tensor(selected, op, "selected", DType::kI64, {-1});
  if (selected.size(0) > keys.size(0))
    throw Error(std::string(op) + ": " + std::to_string(selected.size(0)) + " selected of " +
                std::to_string(keys.size(0)) + " keys")
        .field("selected");
  do_decode_indexer_select(q, head_weights, keys, selected);
}

void Backend::decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                               const Tensor& o) const {
  constexpr const char* op = "decode_attention";
  expect_float(q, op, "q");
  const DType dt = q.dtype();
  expect_tensor(q, op, "q", dt, {-1, -1});
  const int64_t H = q.size(0), c = q.size(1);
  expect_tensor(keys, op, "keys", dt, {-1, c});
  expect_tensor(sink, op, "sink", dt, {H});
  expect_tensor(o, op, "o", dt, {H, c});
  do_decode_attention(q, keys, sink, o);
}

void Backend::adamw_update(const Tensor& weights, const Tensor& grads, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, const AdamWCoefficients& c) const {
  constexpr const char* op = "adamw_update";
  expect_tensor(weights, op, "weights", DType::kF32, {-1});
  const int64_t n = weights.size(0);
  expect_tensor(grads, op, "grads", DType::kF32, {n});
  expect_tensor(exp_avg, op, "exp_avg", DType::kF32, {n});
  expect_tensor(exp_avg_sq, op, "exp_avg_sq", DType::kF32, {n});
  do_adamw_update(weights, grads, exp_avg, exp_avg_sq, c);
}

namespace {

void expect_newton_schulz(const NewtonSchulzParams& p) {
  if (p.iterations < 0 || p.tail_iterations < 0 || p.tail_iterations > p.iterations)
    throw Error("Newton-Schulz needs 0 <= ns_tail_iterations <= ns_iterations");
}

}  // namespace

void Backend::newton_schulz(const Tensor& X, const Tensor& out,
                            const NewtonSchulzParams& params) const {
  constexpr const char* op = "newton_schulz";
  expect_float(X, op, "X");
  expect_tensor(X, op, "X", X.dtype(), {-1, -1});
  if (X.numel() == 0) throw Error("Newton-Schulz needs a non-empty matrix");
  expect_newton_schulz(params);
  expect_tensor(out, op, "out", X.dtype(), {X.size(0), X.size(1)});
  do_newton_schulz(X, out, params);
}

void Backend::muon_update(std::span<const MuonMatrix> matrices, const Tensor& workspace,
                          const MuonStep& step) const {
  constexpr const char* op = "muon_update";
  if (matrices.empty()) return;
  expect_tensor(matrices[0].weights, op, "weights", DType::kF32, {-1, -1});
  const int64_t rows = matrices[0].weights.size(0), cols = matrices[0].weights.size(1);
  if (rows * cols == 0) throw Error("Newton-Schulz needs a non-empty matrix");
  expect_newton_schulz(step.newton_schulz);
  for (const MuonMatrix& m : matrices) {
    expect_tensor(m.weights, op, "weights", DType::kF32, {rows, cols});
    expect_tensor(m.grads, op, "grads", DType::kF32, {rows, cols});
    expect_tensor(m.momentum, op, "momentum", DType::kF32, {rows, cols});
  }
  expect_tensor(workspace, op, "workspace", DType::kF32, {-1});
  const int64_t needed = static_cast<int64_t>(matrices.size()) * rows * cols;
  if (workspace.numel() < needed)
    throw Error(std::string(op) + ": workspace " + workspace.shape_string() + " holds fewer than " +
                std::to_string(needed) + " values")
        .field("workspace");
  do_muon_update(matrices, workspace, step);
}

double Backend::sum_squares(const Tensor& x, const Tensor& bounds) const {
  constexpr const char* op = "sum_squares";
  expect_tensor(x, op, "x", DType::kF32, {-1});
  expect_tensor(bounds, op, "bounds", DType::kI64, {-1, 2});
  return do_sum_squares(x, bounds);  // the ranges' contents: check_sum_ranges
}

}  // namespace trex::kernels
