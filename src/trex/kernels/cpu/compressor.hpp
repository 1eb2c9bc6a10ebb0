#pragma once
// CPU kernels of the compressor pooling ops (backend.hpp; the equations are in
// model/compressor.hpp). Entries run over OpenMP; every (token, column) is
// read by exactly one slot of one entry, so the backward writes disjoint
// elements, and the ape gradient is summed in token order.
#include <cstdint>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// gate, proj [B·S, width], ape [m, width] -> prob [E, slots, c_x] (pooling
// weights), pooled [E, c_x] (written).
template <class T>
void compressor_pool_forward(const CompressorPoolDims& dims, const T* gate, const T* proj,
                             const T* ape, T* prob, T* pooled);

// dpooled [E, c_x] -> dproj, dgate [B·S, width] (written), dape? [m, width] (+=).
template <class T>
void compressor_pool_backward(const CompressorPoolDims& dims, const T* prob, const T* proj,
                              const T* pooled, const T* dpooled, T* dproj, T* dgate, T* dape);

}  // namespace trex::kernels
