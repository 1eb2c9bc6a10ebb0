#pragma once
// The DP × EP × PP process grid (docs/distributed.md).
//
// world size = dp · ep · pp. Rank layout, EP innermost so that the ranks of an
// expert-parallel group (the all-to-all traffic) are adjacent, i.e. on the same
// node under the usual by-slot mapping:
//   world_rank = (pp_rank · dp + dp_rank) · ep + ep_rank.
// Groups:
//   data  — same pp stage, all dp·ep ranks: each takes different micro-batches;
//           dense gradients are reduced over it;
//   ep    — same stage and dp index: routed experts are sharded over it and
//           tokens are dispatched/combined by all-to-all inside it;
//   dp    — same stage and ep index: holds the same expert shard; expert
//           gradients are reduced over it;
//   pp    — same dp and ep index: the pipeline stages, p2p activations.
#include <memory>
#include <string>

#include "trex/parallel/communicator.hpp"

namespace trex::parallel {

struct GridShape {
  int dp = 1;
  int ep = 1;
  int pp = 1;
  int size() const { return dp * ep * pp; }
  std::string to_string() const;  // "DP=2 x EP=2 x PP=1"
};

struct GridCoords {
  int dp = 0, ep = 0, pp = 0;
};

GridCoords grid_coords(const GridShape& shape, int world_rank);
int grid_rank(const GridShape& shape, const GridCoords& coords);

class ProcessGrid {
 public:
  // Collective over `world`; throws trex::Error (field "parallel") when
  // world->size() != shape.size() or a degree is < 1.
  ProcessGrid(std::shared_ptr<Communicator> world, GridShape shape);

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  Communicator& world() { return *world_; }
  Communicator& data() { return *data_; }
  Communicator& ep() { return *ep_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  // The index of this rank among the dp·ep data-parallel replicas of its stage.
  int data_rank() const { return coords_.dp * shape_.ep + coords_.ep; }
  int data_size() const { return shape_.dp * shape_.ep; }
  bool is_first_stage() const { return coords_.pp == 0; }
  bool is_last_stage() const { return coords_.pp == shape_.pp - 1; }

 private:
  GridShape shape_;
  GridCoords coords_;
  std::shared_ptr<Communicator> world_;
  std::unique_ptr<Communicator> data_, ep_, dp_, pp_;
};

}  // namespace trex::parallel
