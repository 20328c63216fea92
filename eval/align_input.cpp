// A transcript in the label set and one utterance ready to align (see align_input.h).
#include "eval/align_input.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "data/phones.h"

namespace timitseg::eval {

namespace {

std::string label_list(const model::LabelSet& ls) {
  std::string out;
  for (const std::string& n : ls.names) out += (out.empty() ? "" : " ") + n;
  return out;
}

std::string nearest_list(const model::LabelSet& ls, const std::string& label) {
  std::string out;
  for (const std::string& n : data::nearest_phones(ls.spec, label, 3)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

int phone_class(const std::string& name, const model::LabelSet& ls) {
  const data::LabelResolution r = ls.spec.resolve(name);  // a phone of the set, or a label it maps into one
  if (r.kind == data::LabelKind::phone) return r.index;
  if (!ls.is_timit()) return -1;
  std::string n61 = name;
  if (data::PhoneSet::timit().index61(n61) < 0) n61 = data::arpabet_to_timit(name);  // "" when not ARPAbet
  const int i61 = n61.empty() ? -1 : data::PhoneSet::timit().index61(n61);
  return i61 >= 0 && n61 != "q" ? ls.class_of_label(i61) : -1;
}

ClassSequence to_classes(const data::Transcript& tr, const model::LabelSet& ls) {
  ClassSequence cs;
  cs.words = tr.words;
  for (size_t i = 0; i < tr.phones.size(); ++i) {
    const std::string& name = tr.phones[i];
    const data::LabelResolution r = ls.spec.resolve(name);  // a phone, or a label the phone set maps into one
    if (r.kind == data::LabelKind::merge) continue;  // q: merged into a neighbour in training labels
    const int c = phone_class(name, ls);  // the set's own name (or a label it maps), a TIMIT 61-set or an ARPAbet name
    if (c < 0)
      throw data::TranscriptError(tr.source + ": phone '" + name + "' is not in the label set (" +
                                  std::to_string(ls.size()) + " phones: " + label_list(ls) +
                                  (ls.is_timit() ? std::string("; TIMIT 61-set names are mapped into it")
                                                 : "; nearest: " + nearest_list(ls, name)) + ")");
    const int w = tr.word_of_phone.empty() ? -1 : tr.word_of_phone[i];
    const int32_t opt = tr.optional.empty() ? 0 : tr.optional[i];
    if (!cs.classes.empty() && cs.classes.back() == c) {  // one run, as in the frame labels
      if (w >= 0) {
        if (cs.word_first.back() < 0) cs.word_first.back() = w;
        cs.word_last.back() = w;
      }
      cs.optional.back() = cs.optional.back() && opt;
      continue;
    }
    if (opt && !cs.optional.empty() && cs.optional.back()) continue;  // a second optional phone in a row
    cs.classes.push_back(c);
    cs.word_first.push_back(w);
    cs.word_last.push_back(w);
    cs.optional.push_back(opt);
  }
  if (std::find(cs.optional.begin(), cs.optional.end(), 0) == cs.optional.end())
    throw data::TranscriptError(tr.source + ": empty transcript" +
                                (cs.classes.empty() ? std::string() : std::string(" (only optional silence)")));
  return cs;
}

Candidates candidates_of(const data::Transcript& tr, const model::LabelSet& ls) {
  Candidates c;
  c.log_prob.push_back(tr.log_prob);
  for (const data::Transcript& alt : tr.alternatives) {
    c.alternatives.push_back(to_classes(alt, ls));
    c.log_prob.push_back(alt.log_prob);
  }
  return c;
}

AlignInput align_input(const std::string& audio, const std::string& id, const data::Transcript& tr,
                       const model::ModelState& s, int threads, bool keep_samples) {
  AlignInput r;
  r.audio = audio;
  r.id = id;
  r.cs = to_classes(tr, s.labels);
  r.alternatives = candidates_of(tr, s.labels);
  r.in = audio_input(data::read_audio(audio), audio, id, s, threads, keep_samples);
  const int64_t n = static_cast<int64_t>(std::count(r.cs.optional.begin(), r.cs.optional.end(), 0));
  if (n > r.in.utt.num_frames)
    throw std::runtime_error(audio + ": the transcript has " + std::to_string(n) +
                             (n == static_cast<int64_t>(r.cs.classes.size()) ? "" : " non-optional") +
                             " phones but the audio only " + std::to_string(r.in.utt.num_frames) +
                             " frames (each phone needs one); it cannot fit");
  return r;
}

}  // namespace timitseg::eval
