// Pronunciation dictionaries in `timitseg align` (see align_dictionary.h).
#include "eval/align_dictionary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "data/espeak_tts.h"
#include "data/phones.h"
#include "model/batch.h"

namespace timitseg::eval {

void check_dictionary_phones(const data::Dictionary& dict, const model::LabelSet& ls) {
  if (dict.format() != data::DictFormat::mfa) return;
  for (const auto& [word, prons] : dict.entries()) {
    const std::vector<data::PronunciationInfo>& info = dict.info(word);
    for (size_t k = 0; k < prons.size(); ++k)
      for (const std::string& p : prons[k]) {
        if (phone_class(p, ls) >= 0) continue;
        std::string names;
        for (const std::string& n : ls.names) names += (names.empty() ? "" : " ") + n;
        throw data::TranscriptError(dict.path() + ":" + std::to_string(info[k].line) + ": phone '" + p + "' of '" +
                                    word + "' is not in the checkpoint's phone set (" + std::to_string(ls.size()) +
                                    " phones: " + names + ")");
      }
  }
}

data::WordOptions words_for_labels(const data::WordOptions& o, const model::LabelSet& ls) {
  data::WordOptions w = o;
  if (ls.is_timit()) return w;  // h# and pau, mapped into the 48/39 sets' sil
  w.closures = false;
  const int sil = ls.spec.silence_index();
  if (sil < 0) {
    w.edge_silence = w.word_silence = false;
  } else {
    w.silence = ls.spec.phones[static_cast<size_t>(sil)];
  }
  return w;
}

std::shared_ptr<data::Dictionary> load_dictionary(const std::string& path, data::DictFormatSetting format,
                                                  const model::LabelSet& ls) {
  if (path.empty()) return nullptr;
  auto dict = std::make_shared<data::Dictionary>(data::Dictionary::load(path, format));
  check_dictionary_phones(*dict, ls);
  return dict;
}

AlignOptions with_g2p(const AlignOptions& o) {
  if (!o.g2p) {
    if (!o.language.empty()) throw std::invalid_argument("align: --language is the language of --g2p espeak; give both");
    return o;
  }
  if (o.dict.empty()) throw std::invalid_argument("align: --g2p espeak pronounces words missing from --dict FILE; give one");
  if (o.language.empty())
    throw std::invalid_argument("align: --g2p espeak needs --language LANG (espeak-ng's code: es, de, cmn, en-us, ...)");
  if (!data::espeak_built_in()) throw std::invalid_argument("align: --g2p espeak: " + data::espeak_missing_message());
  data::espeak_check_language(o.language);
  AlignOptions out = o;
  out.words.g2p = cached_g2p([language = o.language](const std::string& word) {
    return data::espeak_phones(word, language);
  });
  return out;
}

G2p cached_g2p(G2p g2p) {
  struct Cache {
    std::mutex mu;  // held while a word is pronounced: espeak-ng's calls are serialized anyway
    std::map<std::string, std::vector<std::string>> phones;
  };
  auto cache = std::make_shared<Cache>();
  return [cache, g2p = std::move(g2p)](const std::string& word) {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->phones.find(word);
    if (it == cache->phones.end()) it = cache->phones.emplace(word, g2p(word)).first;
    return it->second;
  };
}

std::vector<size_t> choose_pronunciations(model::Executor& exec, const std::vector<const data::Utterance*>& utts,
                                          const std::vector<const ClassSequence*>& primary,
                                          const std::vector<const Candidates*>& alternatives,
                                          const model::ModelState& s) {
  std::vector<size_t> chosen(utts.size(), 0);
  std::vector<const data::Utterance*> rows;
  std::vector<const ClassSequence*> seqs;
  std::vector<std::pair<size_t, size_t>> owner;  // (utterance, candidate) of each row
  int64_t N = 1;
  for (size_t b = 0; b < utts.size(); ++b) {
    if (!alternatives[b] || alternatives[b]->alternatives.empty()) continue;
    for (size_t k = 0; k <= alternatives[b]->alternatives.size(); ++k) {
      const ClassSequence* cs = k == 0 ? primary[b] : &alternatives[b]->alternatives[k - 1];
      const auto needed = std::count(cs->optional.begin(), cs->optional.end(), 0);
      if (k > 0 && needed > utts[b]->num_frames) continue;  // cannot fit: never chosen (the primary was checked)
      rows.push_back(utts[b]);
      seqs.push_back(cs);
      owner.emplace_back(b, k);
      N = std::max<int64_t>(N, static_cast<int64_t>(cs->classes.size()));
    }
  }
  if (rows.empty()) return chosen;
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<int32_t> phones(B * N, 0), nph(B), optional(B * N, 0);  // [B][N], [B], [B][N]
  for (int64_t r = 0; r < B; ++r) {
    nph[r] = static_cast<int32_t>(seqs[r]->classes.size());
    std::copy(seqs[r]->classes.begin(), seqs[r]->classes.end(), phones.begin() + r * N);
    std::copy(seqs[r]->optional.begin(), seqs[r]->optional.end(), optional.begin() + r * N);
  }
  const model::Batch batch = model::make_batch(rows, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  const crf::AlignResult res = exec.align(batch, N, phones, nph, optional, nullptr);
  std::vector<double> best(utts.size(), -INFINITY);
  for (int64_t r = 0; r < B; ++r) {
    const auto [b, k] = owner[static_cast<size_t>(r)];
    const double v = res.score[static_cast<size_t>(r)] + alternatives[b]->log_prob[k];
    if (v > best[b]) best[b] = v, chosen[b] = k;
  }
  return chosen;
}

}  // namespace timitseg::eval
