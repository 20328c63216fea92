// Internals shared by data/dataset.cpp and data/prepare.cpp.
#pragma once

#include <string>

namespace timitseg::data {

// WORKDIR/NAME after checking its size and SHA-256 against manifest.json;
// throws naming the file and telling the user to re-run prepare.
std::string verified_file(const std::string& workdir, const std::string& name);

}  // namespace timitseg::data
