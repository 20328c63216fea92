// Audio input (declared in data/features.h): libsndfile reading with the
// header checks libsndfile does not make (a file cut short, no samples), its
// open errors translated into what is wrong with the header, the down-mix to
// mono, and resampling with libsoxr.
#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/text.h"
#include "data/corpus_formats.h"
#include "data/features.h"

namespace timitseg::data {

namespace {

uint32_t le32(const unsigned char* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// What the file's own header says, read without libsndfile (which silently
// shortens a cut-off file to the bytes present).
struct Header {
  enum Kind { kUnknown, kRiff, kSphere } kind = kUnknown;
  uint64_t file_bytes = 0;
  std::string head;  // the first bytes of the file (up to 64 KiB)
  // RIFF
  bool has_fmt = false, has_data = false;
  uint16_t format_tag = 0, channels = 0, block_align = 0, bits = 0;
  uint32_t rate = 0;
  uint64_t data_bytes = 0;  // as declared
  // SPHERE
  uint64_t header_bytes = 0;
  std::string sph_rate, sph_channels, sph_count, sph_nbytes, sph_coding;
  bool sph_has(const std::string& v) const { return !v.empty(); }
};

std::string sphere_field(const std::string& head, const std::string& name) {
  std::istringstream in(head);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, type, value;
    if (!(ls >> key >> type)) continue;
    if (key == "end_head") break;
    if (key != name) continue;
    std::getline(ls, value);
    const size_t b = value.find_first_not_of(' ');
    return b == std::string::npos ? std::string("?") : value.substr(b);
  }
  return "";
}

Header read_header(const std::string& path) {
  Header h;
  std::ifstream in(path, std::ios::binary);
  if (!in) return h;
  in.seekg(0, std::ios::end);
  h.file_bytes = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  in.seekg(0);
  h.head.resize(static_cast<size_t>(std::min<uint64_t>(h.file_bytes, 65536)));
  in.read(h.head.data(), static_cast<std::streamsize>(h.head.size()));
  h.head.resize(static_cast<size_t>(in.gcount()));
  const auto* p = reinterpret_cast<const unsigned char*>(h.head.data());
  const size_t n = h.head.size();
  if (n >= 4 && std::memcmp(p, "RIFF", 4) == 0) {
    h.kind = Header::kRiff;
    if (n < 12 || std::memcmp(p + 8, "WAVE", 4) != 0) return h;
    // walk the chunks (seeking, so a large chunk before 'data' is fine)
    uint64_t pos = 12;
    unsigned char ck[24];
    while (pos + 8 <= h.file_bytes) {
      in.clear();
      in.seekg(static_cast<std::streamoff>(pos));
      in.read(reinterpret_cast<char*>(ck), 8);
      if (in.gcount() != 8) break;
      const uint32_t size = le32(ck + 4);
      if (std::memcmp(ck, "fmt ", 4) == 0) {
        in.read(reinterpret_cast<char*>(ck + 8), 16);
        if (in.gcount() == 16) {
          h.has_fmt = true;
          h.format_tag = le16(ck + 8);
          h.channels = le16(ck + 10);
          h.rate = le32(ck + 12);
          h.block_align = le16(ck + 20);
          h.bits = le16(ck + 22);
        }
      } else if (std::memcmp(ck, "data", 4) == 0) {
        h.has_data = true;
        h.data_bytes = size;
        break;
      }
      pos += 8 + static_cast<uint64_t>(size) + (size & 1);
    }
  } else if (n >= 7 && std::memcmp(p, "NIST_1A", 7) == 0) {
    h.kind = Header::kSphere;
    std::istringstream ls(h.head.substr(7));
    ls >> h.header_bytes;
    const std::string hdr = h.head.substr(0, static_cast<size_t>(std::min<uint64_t>(h.header_bytes, n)));
    h.sph_rate = sphere_field(hdr, "sample_rate");
    h.sph_channels = sphere_field(hdr, "channel_count");
    h.sph_count = sphere_field(hdr, "sample_count");
    h.sph_nbytes = sphere_field(hdr, "sample_n_bytes");
    h.sph_coding = sphere_field(hdr, "sample_coding");
  }
  return h;
}

bool positive_int(const std::string& s) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return std::stoll(s) > 0;
}

// What is wrong with a header libsndfile refused; `lib` is libsndfile's message.
std::string diagnose(const Header& h, const std::string& lib) {
  if (h.file_bytes == 0) return "empty file (0 bytes), not audio";
  if (h.kind == Header::kRiff) {
    if (h.head.size() < 12) return "cut short inside its RIFF header (" + std::to_string(h.file_bytes) + " bytes)";
    if (h.head.compare(8, 4, "WAVE") != 0)
      return "a RIFF file of type '" + printable_ascii(h.head.substr(8, 4)) + "', not a WAVE file";
    if (!h.has_fmt)
      return "RIFF WAV header has no complete 'fmt ' chunk: the file is cut short inside its header (" +
             std::to_string(h.file_bytes) + " bytes) or is not a WAV file";
    if (h.channels == 0) return "RIFF WAV header gives 0 channels";
    if (h.rate == 0) return "RIFF WAV header gives a sample rate of 0 Hz";
    if (h.format_tag != 1 && h.format_tag != 3 && h.format_tag != 0xfffe) {
      char tag[16];
      std::snprintf(tag, sizeof tag, "0x%04X", h.format_tag);
      return std::string("RIFF WAV sample format ") + tag + " is not PCM or float (compressed audio): convert it to " +
             "PCM WAV first";
    }
    if (!h.has_data)
      return "RIFF WAV header has no 'data' chunk: the file is cut short inside its header (" +
             std::to_string(h.file_bytes) + " bytes) or is not a WAV file";
    return "RIFF WAV header not readable: " + lib;
  }
  if (h.kind == Header::kSphere) {
    if (h.header_bytes == 0) return "NIST SPHERE header has no header size on its second line";
    if (h.file_bytes < h.header_bytes)
      return "cut short inside its NIST SPHERE header (" + std::to_string(h.file_bytes) + " of " +
             std::to_string(h.header_bytes) + " header bytes)";
    if (h.sph_coding.find("shorten") != std::string::npos)
      return "NIST SPHERE samples are compressed with shorten (sample_coding " + printable_ascii(h.sph_coding) +
             "): decompress the file first (e.g. sph2pipe -f wav)";
    if (h.sph_rate.empty()) return "NIST SPHERE header has no sample_rate field";
    if (!positive_int(h.sph_rate)) return "NIST SPHERE header gives sample_rate '" + printable_ascii(h.sph_rate) + "', not a positive integer";
    if (!h.sph_channels.empty() && !positive_int(h.sph_channels))
      return "NIST SPHERE header gives channel_count '" + printable_ascii(h.sph_channels) + "', not a positive integer";
    if (!h.sph_nbytes.empty() && !positive_int(h.sph_nbytes))
      return "NIST SPHERE header gives sample_n_bytes '" + printable_ascii(h.sph_nbytes) + "', not a positive integer";
    return "NIST SPHERE header not readable: " + lib;
  }
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(8, h.head.size()); ++i) {
    const unsigned char c = static_cast<unsigned char>(h.head[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') start += static_cast<char>(c);
    else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      start += b;
    }
  }
  return "not a NIST SPHERE or RIFF WAV file (it starts with \"" + start + "\"; libsndfile: " + lib + ")";
}

int bytes_per_sample(int format) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8: case SF_FORMAT_PCM_U8: return 1;
    case SF_FORMAT_PCM_16: return 2;
    case SF_FORMAT_PCM_24: return 3;
    case SF_FORMAT_PCM_32: case SF_FORMAT_FLOAT: return 4;
    case SF_FORMAT_DOUBLE: return 8;
    default: return 0;
  }
}

}  // namespace

namespace {

// read_audio (first < 0) or the samples [first, last) of the file (last
// clipped to its end); *total (when given) gets the file's sample count.
Audio read_audio_frames(const std::string& path, int64_t first, int64_t last, int64_t* total) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(path + ": is a folder, not an audio file");
  SF_INFO info{};
  SNDFILE* f = sf_open(path.c_str(), SFM_READ, &info);
  if (!f) {
    const std::string lib = sf_strerror(nullptr);
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw std::runtime_error(path + ": cannot open audio file (" + lib + ")");
    throw std::runtime_error(path + ": " + diagnose(read_header(path), lib));
  }
  std::unique_ptr<SNDFILE, int (*)(SNDFILE*)> guard(f, sf_close);
  if (info.channels < 1) throw std::runtime_error(path + ": header gives " + std::to_string(info.channels) + " channels");
  Audio a;
  a.sample_rate = info.samplerate;
  a.channels = info.channels;
  switch (info.format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8: case SF_FORMAT_PCM_U8: a.bits = 8; break;
    case SF_FORMAT_PCM_16: a.bits = 16; break;
    case SF_FORMAT_PCM_24: a.bits = 24; break;
    case SF_FORMAT_PCM_32: a.bits = 32; break;
    default: a.bits = 0;
  }
  switch (info.format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_NIST: a.container = "NIST SPHERE"; break;
    case SF_FORMAT_WAV: a.container = "RIFF WAV"; break;
    default: a.container = "other";
  }
  // libsndfile shortens a file cut off inside its samples to the bytes present:
  // compare with what the header declares, so the user hears "truncated", not
  // (later) "PHN line past the end of the audio".
  const Header h = read_header(path);
  int64_t declared = -1;
  const int bps = bytes_per_sample(info.format);
  if (h.kind == Header::kRiff && h.has_data && bps > 0 && h.data_bytes != 0 && h.data_bytes != 0xffffffffu)
    declared = static_cast<int64_t>(h.data_bytes / (static_cast<uint64_t>(bps) * info.channels));
  else if (h.kind == Header::kSphere && positive_int(h.sph_count))
    declared = std::stoll(h.sph_count);
  const int64_t present = static_cast<int64_t>(info.frames);
  if (declared > present) {
    throw std::runtime_error(path + ": truncated audio: the header says " + std::to_string(declared) + " samples (" +
                             fmt_seconds(static_cast<double>(declared) / info.samplerate) + "), the file holds " +
                             std::to_string(present) + " (" +
                             std::to_string((declared - present) * bps * info.channels) +
                             " bytes of sample data missing)");
  }
  if (present == 0)
    throw std::runtime_error(path + ": no audio samples (the " + a.container + " header and data hold 0 samples)");
  // Normalized float reading gives s / 32768 for 16-bit PCM, exact in float;
  // scaling back by 32768 yields the int16 range Kaldi uses. Mono files are
  // read straight into the samples (no second buffer of the whole file).
  sf_command(f, SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
  if (total) *total = present;
  sf_count_t want = info.frames;
  if (first >= 0) {  // a range: seek to it
    first = std::min(first, present);
    want = std::max<int64_t>(0, std::min(last, present) - first);
    if (first > 0 && sf_seek(f, first, SEEK_SET) != first)
      throw std::runtime_error(path + ": cannot seek to sample " + std::to_string(first) + " (" + sf_strerror(f) + ")");
  }
  const int64_t n = want;
  const int C = info.channels;
  std::vector<float> interleaved(C == 1 ? 0 : static_cast<size_t>(n) * C);  // [N][channels]
  a.samples.resize(static_cast<size_t>(n));
  const sf_count_t got = sf_readf_float(f, C == 1 ? a.samples.data() : interleaved.data(), want);
  if (got != want)
    throw std::runtime_error(path + ": truncated audio: read " + std::to_string(got) + " of " +
                             std::to_string(want) + " samples (" + sf_strerror(f) + ")");
  if (C == 1) {
    for (float& v : a.samples) v = v * 32768.0f;
    return a;
  }
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;  // down-mix: the mean of the channels
    for (int c = 0; c < C; ++c) sum += interleaved[static_cast<size_t>(i) * C + c];
    a.samples[i] = static_cast<float>(sum / C * 32768.0);
  }
  return a;
}

}  // namespace

Audio read_audio(const std::string& path) { return read_audio_frames(path, -1, -1, nullptr); }

Audio read_audio_segment(const std::string& path, double start_s, double end_s, double* total_seconds) {
  SF_INFO info{};
  SNDFILE* f = sf_open(path.c_str(), SFM_READ, &info);  // the rate, to turn seconds into samples
  if (!f) return read_audio(path);                        // (read_audio names the problem)
  sf_close(f);
  int64_t total = 0;
  const int rate = info.samplerate;
  Audio a = read_audio_frames(path, std::llround(std::max(0.0, start_s) * rate), std::llround(end_s * rate), &total);
  if (total_seconds) *total_seconds = rate > 0 ? static_cast<double>(total) / rate : 0.0;
  return a;
}

std::vector<float> resample(const std::vector<float>& x, int from, int to) {
  if (from <= 0 || to <= 0) throw std::invalid_argument("resample: rates must be > 0");
  if (from == to) return x;
  const std::vector<double> in(x.begin(), x.end());
  const size_t olen = static_cast<size_t>(std::llround(static_cast<double>(x.size()) * to / from));
  std::vector<double> out(olen);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT64_I, SOXR_FLOAT64_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_VHQ, 0);  // linear phase
  const soxr_runtime_spec_t rt = soxr_runtime_spec(1);           // one thread: deterministic
  size_t odone = 0;
  const soxr_error_t err = soxr_oneshot(from, to, 1, in.data(), in.size(), nullptr, out.data(), olen, &odone, &io,
                                        &q, &rt);
  if (err) throw std::runtime_error(std::string("resample from ") + std::to_string(from) + " Hz to " +
                                    std::to_string(to) + " Hz: libsoxr: " + err);
  std::vector<float> y(olen, 0.0f);
  for (size_t i = 0; i < std::min(odone, olen); ++i) y[i] = static_cast<float>(out[i]);
  return y;
}

Audio to_rate(const Audio& a, int rate, std::string* what) { return to_rate(Audio(a), rate, what); }

Audio to_rate(Audio&& a, int rate, std::string* what) {
  Audio out = std::move(a);  // a file at the model's rate is not copied
  std::string note;
  if (out.sample_rate != rate) {
    note = "resampled from " + std::to_string(out.sample_rate) + " Hz to " + std::to_string(rate) + " Hz";
    out.samples = resample(out.samples, out.sample_rate, rate);
    out.sample_rate = rate;
  }
  if (out.channels > 1)
    note += (note.empty() ? "" : ", ") + std::string("down-mixed ") + std::to_string(out.channels) + " channels (mean)";
  if (what) *what = note;
  return out;
}

}  // namespace timitseg::data
