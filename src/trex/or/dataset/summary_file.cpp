#include "trex/or/dataset/summary_file.hpp"

#include <filesystem>

#include "trex/core/atomic_file.hpp"

namespace trex::orlib {

void write_summary_file(const std::string& out_dir, nlohmann::json fields, double seconds,
                        const std::string& problems_path, const JsonlStats& input) {
  fields["seconds"] = seconds;
  fields["problems"] = problems_path;
  fields["input"] = input.to_json();
  fields["skipped_lines"] = input.skipped;
  write_file_atomic((std::filesystem::path(out_dir) / "summary.json").string(),
                    fields.dump(2) + "\n");
}

}  // namespace trex::orlib
