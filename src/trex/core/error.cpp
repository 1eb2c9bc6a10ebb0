#include "trex/core/error.hpp"

#include <sstream>

namespace trex {

Error& Error::rebuild() {
  // ostringstream rather than string concatenation: GCC 12 reports a spurious
  // -Wrestrict on `s += ": "` chains here.
  std::ostringstream out;
  if (!file_.empty()) {
    out << file_;
    if (line_ > 0) out << ':' << line_;
    out << ": ";
  } else if (line_ > 0) {
    out << "line " << line_ << ": ";
  }
  if (!field_.empty()) out << "field '" << field_ << "': ";
  out << message_;
  full_ = out.str();
  return *this;
}

}  // namespace trex
