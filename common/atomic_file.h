// Atomic file writes: data goes to a temporary file in the destination folder
// and is renamed over the destination only by commit(). If the writer is
// destroyed without commit() (an exception, an error), the temporary file is
// removed and the destination is untouched: nothing is ever half-written.
#pragma once

#include <cstdio>
#include <string>

namespace timitseg {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // throws naming the path
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // throws naming the path
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();  // flush, fsync, rename; throws naming the path

  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

// Whole-file convenience: atomically replace PATH with CONTENT.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace timitseg
