// What this binary is: the project version, the git commit of the source tree
// it was built from and the build type. Defined in ONE generated translation
// unit (BUILD/common/generated/version.cpp, written by CMake at configure time
// from common/version.cpp.in), which includes the commit from
// BUILD/common/generated/git_commit.h: common/git_stamp.cmake rewrites that
// header before every build of timitseg_common when HEAD or the tree's
// "-dirty" changed, so a build after a commit recompiles that file only.
#pragma once

namespace timitseg {

const char* version();     // "0.1.0" (project(VERSION) in CMakeLists.txt)
const char* git_commit();  // 40 hex digits, with "-dirty" when the tree had changes; "unknown" outside git
const char* build_type();  // CMAKE_BUILD_TYPE: "Release", "Debug", ...
// What the configure step built in (`timitseg --version` says it):
const char* cuda_architectures();  // CMAKE_CUDA_ARCHITECTURES ("80;86;89;90"); "" in a build without CUDA
bool nccl_built_in();              // NCCL (found next to the CUDA toolkit, with MPI): GPU all-reduce

}  // namespace timitseg
