// IntervalSpill (data/corpus_formats.h): the label intervals of a Kaldi CTM or
// of a manifest's inline segments on disk, so that the scan of a corpus holds
// byte spans per utterance, not its labels.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "data/corpus_formats.h"

namespace timitseg::data {

namespace {

constexpr size_t kPendingBytes = 1 << 16;  // appended records written in blocks of about this size

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(const std::string& in, size_t* at) {
  T v;
  if (*at + sizeof v > in.size()) throw std::runtime_error("label spill: a record is cut short");
  std::memcpy(&v, in.data() + *at, sizeof v);
  *at += sizeof v;
  return v;
}

}  // namespace

IntervalSpill::IntervalSpill() : f_(std::tmpfile()) {
  if (!f_) throw std::runtime_error(std::string("cannot create a temporary file for the corpus's labels (tmpfile: ") +
                                    std::strerror(errno) + ")");
}

IntervalSpill::~IntervalSpill() {
  if (f_) std::fclose(f_);
}

void IntervalSpill::flush_locked() const {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::pwrite(fileno(f_), pending_.data() + done, pending_.size() - done,
                               static_cast<off_t>(written_ + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(std::string("cannot write the corpus's labels to a temporary file (") +
                               std::strerror(errno) + "; disk full?)");
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(pending_.size());
  pending_.clear();
}

void IntervalSpill::append(const LabelInterval& iv, std::vector<LabelSpan>* spans) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t offset = written_ + static_cast<int64_t>(pending_.size());
  put(pending_, iv.start);
  put(pending_, iv.end);
  put(pending_, static_cast<int32_t>(iv.line));
  put(pending_, static_cast<uint32_t>(iv.label.size()));
  pending_ += iv.label;
  const int64_t bytes = written_ + static_cast<int64_t>(pending_.size()) - offset;
  if (!spans->empty() && spans->back().offset + spans->back().bytes == offset) spans->back().bytes += bytes;
  else spans->push_back({offset, bytes});
  if (pending_.size() >= kPendingBytes) flush_locked();
}

std::vector<LabelInterval> IntervalSpill::read(const std::vector<LabelSpan>& spans) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty()) flush_locked();
  }
  std::vector<LabelInterval> out;
  std::string buf;
  for (const LabelSpan& s : spans) {
    buf.resize(static_cast<size_t>(s.bytes));
    size_t done = 0;
    while (done < buf.size()) {
      const ssize_t n = ::pread(fileno(f_), buf.data() + done, buf.size() - done,
                                static_cast<off_t>(s.offset + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(std::string("cannot read the corpus's labels back from their temporary file (") +
                                           (n < 0 ? std::strerror(errno) : "cut short") + ")");
      done += static_cast<size_t>(n);
    }
    for (size_t at = 0; at < buf.size();) {
      LabelInterval iv;
      iv.start = get<double>(buf, &at);
      iv.end = get<double>(buf, &at);
      iv.line = get<int32_t>(buf, &at);
      const auto len = get<uint32_t>(buf, &at);
      if (at + len > buf.size()) throw std::runtime_error("label spill: a record is cut short");
      iv.label.assign(buf, at, len);
      at += len;
      out.push_back(std::move(iv));
    }
  }
  return out;
}

}  // namespace timitseg::data
