// `prepare --corpus` of labels without times (docs/data.md "Transcripts"): each
// utterance's words or phones as a phone sequence for the constrained pass
// (data::Utterance::transcript). Words become phones through a pronunciation
// dictionary (data/transcripts.h, words_to_phones) or espeak-ng's G2P
// (data/espeak_tts.h, espeak_phones); the phone set's silence is offered,
// optional, between words and at both ends.
#include <algorithm>
#include <map>
#include <set>

#include "data/espeak_tts.h"
#include "data/prepare_corpus_internal.h"
#include "data/transcripts.h"

namespace timitseg::data {

namespace {

bool silence_token(const std::string& t) {
  const std::string l = to_lower(t);
  return l.empty() || l == "sil" || l == "sp" || l == "silence" || l == "<sil>";
}

std::string join_tokens(const std::vector<std::string>& v, size_t max = 12) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? " " : "") + v[i];
  return v.size() > max ? s + " ..." : s;
}

bool has_error(const std::vector<Problem>& ps) {
  for (const auto& p : ps)
    if (p.error) return true;
  return false;
}

// The dictionary and G2P of --dict / --g2p, and what they did.
struct Pronouncer {
  Dictionary dict;
  bool have_dict = false;
  WordOptions options;
  std::map<std::string, std::vector<std::string>> g2p_cache;  // word -> espeak's phones

  explicit Pronouncer(const PrepareOptions& prepare_opts) {
    if (!prepare_opts.dict.empty()) dict = Dictionary::load(prepare_opts.dict, prepare_opts.dict_format), have_dict = true;
    options.edge_silence = options.word_silence = options.optional_silence = false;  // silence: the set's, added later
    options.max_candidates = 1;
    // TIMIT's closures (bcl b) only for a phone set that has them
    options.closures = !prepare_opts.phone_set.empty() && PhoneSetSpec::from_setting(prepare_opts.phone_set).index("bcl") >= 0;
    if (prepare_opts.g2p == G2pEngine::espeak) {
      if (prepare_opts.language.empty()) throw std::invalid_argument("--g2p espeak needs --language (en-us, es, de, fr, ...)");
      espeak_check_language(prepare_opts.language);
      options.g2p = [this, lang = prepare_opts.language](const std::string& word) {
        auto it = g2p_cache.find(word);
        if (it == g2p_cache.end()) it = g2p_cache.emplace(word, espeak_phones(word, lang)).first;
        return it->second;
      };
    }
  }
};

// e's words as phones (e.phones, e.word_start); a problem line (the missing words) when they cannot be.
void pronounce(CorpusEntry& e, Pronouncer& p, TranscriptStats* st) {
  std::vector<Word> words;
  for (const auto& t : e.tokens)
    if (!silence_token(t)) words.push_back({to_lower(t), e.transcript_line});
  const std::string where = e.transcript_path + (e.transcript_line ? ":" + std::to_string(e.transcript_line) : "");
  if (words.empty()) {
    e.problems.push_back({e.transcript_path, e.transcript_line, "empty transcript (utterance " + e.id + ")", true});
    return;
  }
  try {
    const Transcript tr = words_to_phones(words, p.dict, where, p.options);
    for (size_t k = 0; k < tr.phones.size(); ++k) {
      e.phones.push_back(tr.phones[k]);
      e.word_start.push_back(k == 0 || tr.word_of_phone[k] != tr.word_of_phone[k - 1]);
    }
  } catch (const MissingWordsError& ex) {
    e.problems.push_back({e.transcript_path, e.transcript_line,
                          missing_words_line(ex.words(), p.have_dict ? p.dict.path() : "(none: no --dict)") +
                              " (utterance " + e.id + ")", true});
    return;
  } catch (const std::exception& ex) {
    e.problems.push_back({e.transcript_path, e.transcript_line, std::string(ex.what()) + " (utterance " + e.id + ")",
                          true});
    return;
  }
  // Each word's other pronunciations (the dictionary's variants), converted as the first
  // (closures, ARPAbet): offered to the loss as a phone graph (transcript_indices).
  WordOptions one = p.options;
  one.max_candidates = 64;
  for (size_t i = 0; i < words.size(); ++i) {
    const auto* prons = p.have_dict ? p.dict.pronunciations(words[i].text) : nullptr;
    if (!prons || prons->size() < 2) continue;
    ++st->words_with_alternatives;
    const Transcript tr = words_to_phones({words[i]}, p.dict, where, one);
    if (e.alternatives.empty()) e.alternatives.resize(words.size());
    for (const Transcript& alt : tr.alternatives) e.alternatives[i].push_back(alt.phones);
  }
}

}  // namespace

TranscriptStats pronounce_transcripts(std::vector<CorpusEntry>& es, const PrepareOptions& prepare_opts) {
  TranscriptStats st;
  size_t words = 0;
  const CorpusEntry* first = nullptr;
  for (const auto& e : es)
    if (e.transcript_kind == TranscriptKind::words && !has_error(e.problems) && words++ == 0) first = &e;
  if (words > 0 && prepare_opts.dict.empty() && !prepare_opts.g2p)
    throw std::runtime_error(prepare_opts.corpus_dir + ": " + std::to_string(words) + " utterance(s) have word transcripts (the "
                             "first: " + first->id + ", " + first->transcript_path + "); give --dict FILE or --g2p "
                             "espeak --language L to turn the words into phones");
  std::unique_ptr<Pronouncer> p;
  for (auto& e : es) {
    if (e.transcript_kind == TranscriptKind::none || has_error(e.problems)) continue;
    e.phones.clear(), e.word_start.clear(), e.alternatives.clear();
    if (e.transcript_kind == TranscriptKind::phones) {
      e.phones = e.tokens;
      if (e.tokens.empty())
        e.problems.push_back({e.transcript_path, e.transcript_line, "empty transcript (utterance " + e.id + ")", true});
      continue;
    }
    if (!p) p = std::make_unique<Pronouncer>(prepare_opts);
    pronounce(e, *p, &st);
  }
  if (p) {
    st.g2p_words = static_cast<int64_t>(p->g2p_cache.size());
    if (p->have_dict)
      for (const auto& [word, prons] : p->dict.entries())
        for (const auto& pron : prons)
          for (const auto& ph : pron) st.dictionary_phones.insert(ph);
  }
  return st;
}

std::map<std::string, int64_t> transcript_phone_counts(const std::vector<CorpusEntry>& es, const TranscriptStats& st,
                                                       bool all_splits) {
  std::map<std::string, int64_t> counts;
  for (const auto& ph : st.dictionary_phones) counts[ph] += 0;
  for (const auto& e : es) {
    if (e.transcript_kind == TranscriptKind::none || has_error(e.problems) || (!all_splits && e.split != SplitName::train)) continue;
    for (const auto& ph : e.phones)
      if (!silence_token(ph)) ++counts[ph];
  }
  return counts;
}

namespace {

// Phone names -> indices of ps (merged labels left out, equal neighbours merged); false
// with *bad the first name outside the set.
bool phone_indices(const PhoneSetSpec& ps, const std::vector<std::string>& names, std::vector<int32_t>* out,
                   std::string* bad) {
  out->clear();
  for (const std::string& name : names) {
    const LabelResolution r = ps.resolve(name);
    if (r.kind == LabelKind::phone) {
      if (out->empty() || out->back() != r.index) out->push_back(r.index);
    } else if (r.kind != LabelKind::merge) {
      *bad = name;
      return false;
    }
  }
  return true;
}

// The slots of a word transcript whose words have alternatives (transcript_indices);
// false when no word has two that differ in ps, or a word's first pronunciation has a
// phone outside ps (the chain is used then, and names it). Another pronunciation with
// such a phone is not offered: one warning naming it.
bool transcript_slots(const CorpusEntry& e, const PhoneSetSpec& ps, std::vector<int32_t>* seq,
                      std::vector<uint8_t>* opt, std::vector<int32_t>* slot, std::vector<Problem>* problems) {
  const int sil = ps.silence_index();
  std::vector<std::vector<std::vector<int32_t>>> words;  // [word][k] distinct pronunciations as indices
  std::vector<Problem> warnings;
  std::vector<std::string> cur;
  auto close_word = [&]() {
    if (cur.empty()) return true;
    const size_t w = words.size();
    words.emplace_back();
    std::vector<std::vector<std::string>> names{cur};
    if (w < e.alternatives.size()) names.insert(names.end(), e.alternatives[w].begin(), e.alternatives[w].end());
    for (size_t k = 0; k < names.size(); ++k) {
      std::vector<int32_t> idx;
      std::string bad;
      if (!phone_indices(ps, names[k], &idx, &bad)) {
        if (k == 0) return false;
        std::string pron;
        for (const auto& n : names[k]) pron += (pron.empty() ? "" : " ") + n;
        warnings.push_back({e.transcript_path, e.transcript_line,
                            "pronunciation '" + pron + "' (utterance " + e.id + ") has phone '" + bad +
                                "', which is not in phone set " + ps.name + ": not offered (the word's others are)",
                            false});
        continue;
      }
      if (!idx.empty() && std::find(words[w].begin(), words[w].end(), idx) == words[w].end()) words[w].push_back(idx);
    }
    cur.clear();
    return !words[w].empty();
  };
  for (size_t k = 0; k < e.phones.size(); ++k) {
    if (k > 0 && k < e.word_start.size() && e.word_start[k] && !close_word()) return false;
    cur.push_back(e.phones[k]);
  }
  if (!close_word()) return false;
  problems->insert(problems->end(), warnings.begin(), warnings.end());
  bool several = false;
  for (const auto& w : words) several = several || w.size() > 1;
  if (!several) return false;
  seq->clear(), opt->clear(), slot->clear();
  int32_t s = 0;
  auto add_slot = [&](const std::vector<std::vector<int32_t>>& alts, bool optional) {
    for (size_t k = 0; k < alts.size(); ++k)
      for (int32_t x : alts[k]) seq->push_back(x), opt->push_back(optional), slot->push_back(s << 8 | static_cast<int32_t>(k));
    ++s;
  };
  for (size_t w = 0; w < words.size(); ++w) {
    if (sil >= 0) add_slot({{sil}}, true);  // before each word, and after the last below
    add_slot(words[w], false);
  }
  if (sil >= 0) add_slot({{sil}}, true);
  return true;
}

}  // namespace

int64_t transcript_min_phones(const std::vector<uint8_t>& opt, const std::vector<int32_t>& slot) {
  int64_t needed = 0;
  if (slot.empty()) {
    for (uint8_t o : opt) needed += !o;
    return needed;
  }
  for (size_t k = 0; k < slot.size();) {  // one slot: its alternatives' lengths
    size_t end = k;
    int64_t best = -1, len = 0;
    for (; end < slot.size() && slot[end] >> 8 == slot[k] >> 8; ++end) {
      ++len;
      if (end + 1 == slot.size() || slot[end + 1] != slot[end]) best = best < 0 ? len : std::min(best, len), len = 0;
    }
    if (!opt[k]) needed += best;
    k = end;
  }
  return needed;
}

bool transcript_indices(const CorpusEntry& e, const PhoneSetSpec& ps, std::vector<int32_t>* seq,
                        std::vector<uint8_t>* opt, std::vector<Problem>* problems, std::vector<int32_t>* slot) {
  seq->clear(), opt->clear();
  if (slot) slot->clear();
  if (slot && !e.alternatives.empty() && e.transcript_kind == TranscriptKind::words &&
      transcript_slots(e, ps, seq, opt, slot, problems))
    return true;
  const int sil = ps.silence_index();
  auto push = [&](int index, bool optional) {  // consecutive equal phones merged (obligatory when one is)
    if (!seq->empty() && seq->back() == index) opt->back() = opt->back() && optional;
    else seq->push_back(index), opt->push_back(optional);
  };
  for (size_t k = 0; k < e.phones.size(); ++k) {
    const std::string& name = e.phones[k];
    if (k > 0 && sil >= 0 && k < e.word_start.size() && e.word_start[k]) push(sil, true);
    LabelResolution r = ps.resolve(name);
    if (r.kind == LabelKind::unknown && silence_token(name) && sil >= 0) r = {LabelKind::phone, sil};
    if (r.kind == LabelKind::phone) {
      push(r.index, false);
    } else if (r.kind != LabelKind::merge) {  // merged labels (TIMIT's q) join their neighbour: nothing to add
      std::string nearest;
      for (const auto& n : nearest_phones(ps, name, 3)) nearest += (nearest.empty() ? "" : ", ") + n;
      problems->push_back({e.transcript_path, e.transcript_line,
                           r.kind == LabelKind::drop ? "phone '" + name + "' of utterance " + e.id +
                                                           " is dropped by phone set " + ps.name
                                                     : "phone '" + name + "' of utterance " + e.id +
                                                           " is not in phone set " + ps.name + " (nearest: " +
                                                           nearest + ")", true});
      return false;
    }
  }
  // the optional silence at both ends, unless the transcript starts (ends) with a silence of the set
  if (sil >= 0 && (seq->empty() || !ps.is_silence(seq->back()))) push(sil, true);
  if (sil >= 0 && !ps.is_silence(seq->front())) seq->insert(seq->begin(), sil), opt->insert(opt->begin(), 1);
  size_t obligatory = 0;
  for (uint8_t o : *opt) obligatory += !o;
  if (obligatory == 0) {
    problems->push_back({e.transcript_path, e.transcript_line,
                         "empty transcript (utterance " + e.id + ": silence only)", true});
    return false;
  }
  return true;
}

std::string transcript_conflict(const std::vector<int32_t>& seq, const std::vector<MappedInterval>& m,
                                const PhoneSetSpec& ps) {
  auto speech = [&](std::vector<int32_t> v) {  // silence left out, runs merged
    std::vector<int32_t> out;
    for (int32_t x : v)
      if (!ps.is_silence(x) && (out.empty() || out.back() != x)) out.push_back(x);
    return out;
  };
  std::vector<int32_t> timed;
  for (const auto& iv : m) timed.push_back(iv.index);
  const std::vector<int32_t> a = speech(seq), b = speech(timed);
  if (a == b) return "";
  auto names = [&](const std::vector<int32_t>& v) {
    std::vector<std::string> s;
    for (int32_t x : v) s.push_back(ps.phones[static_cast<size_t>(x)]);
    return "'" + join_tokens(s) + "'";
  };
  return "the phones column " + names(a) + " is not the sequence of the row's times " + names(b) +
         " (silence aside): give one of them";
}

}  // namespace timitseg::data
