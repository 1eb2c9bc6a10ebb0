#include "trex/parallel/process_grid.hpp"

#include "trex/core/error.hpp"

namespace trex::parallel {

std::string GridShape::to_string() const {
  return "DP=" + std::to_string(dp) + " x EP=" + std::to_string(ep) + " x PP=" + std::to_string(pp);
}

GridCoords grid_coords(const GridShape& shape, int world_rank) {
  GridCoords c;
  c.ep = world_rank % shape.ep;
  c.dp = (world_rank / shape.ep) % shape.dp;
  c.pp = world_rank / (shape.ep * shape.dp);
  return c;
}

int grid_rank(const GridShape& shape, const GridCoords& c) {
  return (c.pp * shape.dp + c.dp) * shape.ep + c.ep;
}

ProcessGrid::ProcessGrid(std::shared_ptr<Communicator> world, GridShape shape)
    : shape_(shape), world_(std::move(world)) {
  if (shape.dp < 1 || shape.ep < 1 || shape.pp < 1)
    throw Error("parallel degrees must be >= 1 (got " + shape.to_string() + ")").field("parallel");
  if (world_->size() != shape.size())
    throw Error("the process grid " + shape.to_string() + " needs " + std::to_string(shape.size()) +
                " ranks but " + std::to_string(world_->size()) +
                (world_->size() == 1 ? " process runs (launch with `mpirun -np " +
                                           std::to_string(shape.size()) + " trex ...`)"
                                     : " ranks were launched"))
        .field("parallel");
  coords_ = grid_coords(shape, world_->rank());
  // Colors are unique per group; keys order the members by their grid index.
  data_ = world_->split(coords_.pp, data_rank(), "data");
  ep_ = world_->split(coords_.pp * shape.dp + coords_.dp, coords_.ep, "ep");
  dp_ = world_->split(coords_.pp * shape.ep + coords_.ep, coords_.dp, "dp");
  pp_ = world_->split(coords_.dp * shape.ep + coords_.ep, coords_.pp, "pp");
}

}  // namespace trex::parallel
