#include "trex/kernels/op_checks.hpp"

#include <string>

#include "trex/core/error.hpp"

namespace trex::kernels {

void check_attention_probabilities(const AttentionKeyTensors& keys, const Tensor& prob,
                                   const char* op) {
  const int64_t N = keys.prob_offsets.numel() - 1;
  const int64_t expected = keys.prob_offsets.data<int64_t>()[N];
  if (prob.numel() != expected)
    throw Error(std::string(op) + ": prob is " + prob.shape_string() + ", expected [" +
                std::to_string(expected) + "] (prob_offsets[N])")
        .field("prob");
}

void check_balance_sequences(const Tensor& sequences, int64_t N, const char* op) {
  const int64_t* s = sequences.data<int64_t>();
  for (int64_t b = 0; b < sequences.size(0); ++b)
    if (s[2 * b] < 0 || s[2 * b + 1] <= 0 || s[2 * b] + s[2 * b + 1] > N)
      throw Error(std::string(op) + ": sequence " + std::to_string(b) + " [" +
                  std::to_string(s[2 * b]) + ", +" + std::to_string(s[2 * b + 1]) +
                  ") is empty or not inside the " + std::to_string(N) + " tokens")
          .field("sequences");
}

void check_row_groups(const Tensor& offsets, int64_t rows, std::span<const Tensor> w,
                      const char* op) {
  const int64_t G = offsets.numel() - 1;
  const int64_t* o = offsets.data<int64_t>();
  bool ascending = G >= 0 && o[0] == 0 && o[G] == rows;
  for (int64_t g = 0; ascending && g < G; ++g) ascending = o[g] <= o[g + 1];
  if (!ascending)
    throw Error(std::string(op) + ": offsets " + offsets.shape_string() +
                " do not ascend from 0 to the " + std::to_string(rows) + " rows of x")
        .field("offsets");
  for (int64_t g = 0; g < G; ++g)
    if (o[g + 1] > o[g] && !w[static_cast<size_t>(g)].defined()) {
      const std::string name = "w[" + std::to_string(g) + "]";
      throw Error(std::string(op) + ": " + name + " is missing").field(name);
    }
}

void check_compressed_keys_length(const Tensor& comp_offsets, const Tensor& comp_list) {
  const int64_t needed = comp_offsets.data<int64_t>()[comp_offsets.numel() - 1];
  if (comp_list.numel() != needed)
    throw Error("attention_compressed_keys: comp_list has " + std::to_string(comp_list.numel()) +
                " entries, the offsets need " + std::to_string(needed))
        .field("comp_list");
}

void check_sum_ranges(const Tensor& x, const Tensor& bounds) {
  const int64_t* b = bounds.data<int64_t>();
  for (int64_t i = 0; i < bounds.size(0); ++i)
    if (b[2 * i] < 0 || b[2 * i] > b[2 * i + 1] || b[2 * i + 1] > x.size(0))
      throw Error("sum_squares: range " + std::to_string(i) + " [" + std::to_string(b[2 * i]) +
                  ", " + std::to_string(b[2 * i + 1]) + ") is not inside x " + x.shape_string())
          .field("bounds");
}

}  // namespace trex::kernels
