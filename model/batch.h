// Batch collation: utterances -> one padded batch [B][T][D] with frame labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::model {

// A padded batch, batch-major as in the CRF interface.
template <class S>
struct BatchInput {
  int B = 0, T = 0;
  std::vector<S> features;       // [B][T][D] (normalized; padding ignored)
  std::vector<int32_t> lengths;  // [B], each in [1, T]
  // The features the Gaussian head reads (crf.gaussian_head, model/gaussian_head.h) when they differ from
  // `features`: a training batch's before augment.*_masks (a masked frame is no sample of a class's
  // density); [B][T][D], empty = `features`.
  std::vector<S> head_features;
  // A rank's share of a global batch (several training processes,
  // train/batches.h shard_of_batch): row b is row share_rows[b] of the global
  // batch of global_B rows padded to global_T frames, and gets that row's
  // dropout masks (the CPU draws the whole global batch's masks from the run's
  // engine and keeps its rows; the GPU hashes the global index). Empty: the
  // batch is a whole batch.
  std::vector<int32_t> share_rows;  // [B]
  int global_B = 0, global_T = 0;
};

// What supervises the CRF on a batch: the gold segmentation of the frame
// labels (the NLL of docs/crf.md), or each utterance's phone sequence (the
// transcript NLL, log Z - log Z_c: docs/crf.md "Training from transcripts").
enum class BatchSupervision { segments, transcript };

// A padded batch, ready for the network and the CRF.
struct Batch {
  BatchInput<float> input;            // features [B][T][D] (normalized), lengths [B]
  std::vector<int32_t> labels;        // [B][T] label-set indices; padding repeats the last label (transcript batches: 0, unread)
  // Transcript batches (N > 0): phones [B][N] class indices, num_phones [B],
  // optional [B][N] (1: the phone may take 0 frames, an optional silence),
  // links [B][N] the phone graph (crf/phone_graph.h) each row trains on: the
  // chain of its optional flags, or its words' several pronunciations.
  int N = 0;
  std::vector<int32_t> phones, num_phones, optional, links;
  bool transcript() const { return N > 0; }
  // links [B][N] (a batch built without them, e.g. by hand: the chain of optional).
  std::vector<int32_t> graph_links() const;
  std::vector<std::string> ids;       // [B] utterance ids
  std::vector<int32_t> source_frames; // [B] frames before --fixed-length
  int64_t frames = 0;                 // sum of lengths
};

// Collates utterances: CMVN applied when cmvn != nullptr; fixed_length > 0
// truncates or pads (zeros, label repeated) every utterance to exactly N frames
// and reports N as its length (the reference script's --fixed-length).
// supervision transcript: each utterance's phone sequence (its own
// data::Utterance::transcript, else the one read off its frame labels by
// transcript_of_labels) fills phones/num_phones/optional and labels stay 0;
// an utterance without times needs it (segments throws naming it).
Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length, BatchSupervision supervision = BatchSupervision::segments);

// An utterance's phone sequence in classes (phones) with its optional flags:
// its transcript when it has one (data::Utterance::transcript, mapped into the
// classes; equal neighbours merged, also across an optional phone, which is
// then dropped: skipped, it would read the same segmentations twice), else the
// classes of its frame labels' maximal runs, every one required: the phone
// sequence with its times hidden (silences and TIMIT's closures included, as a
// `phones` transcript made from the same labels gives them). Throws naming the
// utterance when a label or phone has no class.
//
// With several pronunciations of a word (data::Utterance::transcript_slot), the
// sequence is a phone graph (crf::PhoneGraphBuilder over the slots, each
// alternative mapped into the classes with its equal neighbours merged, equal
// alternatives once): phones are its nodes, links its links, primary 1 on the
// nodes of each slot's first (most probable) alternative; optional then marks the
// optional silences' nodes. Without alternatives links and primary are empty.
struct PhoneSequence {
  std::vector<int32_t> phones;
  std::vector<int32_t> optional;
  std::vector<int32_t> links;    // the graph; empty = the chain of optional
  std::vector<uint8_t> primary;  // empty = every phone
  // The fewest phones of a path (the chain: those that cannot be skipped): a
  // feasible utterance has at least this many frames.
  int required() const;
  // links, or the chain's.
  std::vector<int32_t> graph() const;
  bool on_primary(size_t i) const { return primary.empty() || primary[i] != 0; }
};
PhoneSequence transcript_of(const data::Utterance& u, const LabelSet& ls);

// The flat start (HTK's uniform segmentation, Kaldi's align-equal): frame
// labels [T] that divide T frames equally among the required phones of s (of
// its primary path: each word's most probable pronunciation), in order; an
// optional phone (an optional silence) gets no frame. With n
// required phones, phone i (0-based) takes frames [floor(i T / n),
// floor((i + 1) T / n)): every phone floor(T / n) or ceil(T / n) frames, the
// longer ones spread along the utterance (10 frames, 3 phones: 3, 3, 4).
// Throws when T < n (a phone would get no frame).
std::vector<int32_t> flat_start_labels(const PhoneSequence& s, int T);

// The pronunciation combinations of an utterance with several pronunciations
// of a word (data::Utterance::transcript_slot): copies of u whose transcripts
// are chains, one alternative per slot, so that forced alignment (a chain's
// constrained Viterbi) can try each and keep the best, as `align --dict` does.
// The slots in order, each slot's alternatives multiply the count while it
// stays within max_chains, else the slot keeps its alternative 0 (the most
// probable); the first chain is the primary path (every slot's alternative 0),
// the last slot's choice varies fastest. Each copy keeps u's id and features,
// the chosen phones with their transcript_optional (transcript_of merges equal
// neighbours as for any chain), and no transcript_slot. An utterance without
// alternatives gives {u}.
std::vector<data::Utterance> pronunciation_chains(const data::Utterance& u,
                                                 int max_chains = data::kMaxPronunciationCombinations);

}  // namespace timitseg::model
