// The corpus readers of data/corpus_formats.h on small hand-written files:
// TextGrid long and short formats, UTF-8 with BOM and UTF-16 LE/BE, a missing
// tier; Buckeye .phones header quirks; a Kaldi data dir with segments, CTM and
// a refused pipe; a CSV manifest with quoted commas and a JSON-lines one;
// interval checks; splits by speaker and --split-file.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/corpus_formats.h"
#include "data/transcripts.h"
#include "util.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

const char* kLong = R"(File type = "ooTextFile"
Object class = "TextGrid"

xmin = 0 
xmax = 0.9 
tiers? <exists> 
size = 2 
item []: 
    item [1]:
        class = "IntervalTier" 
        name = "words" 
        xmin = 0 
        xmax = 0.9 
        intervals: size = 1 
        intervals [1]:
            xmin = 0 
            xmax = 0.9 
            text = "see ""it""" 
    item [2]:
        class = "IntervalTier" 
        name = "phones" 
        xmin = 0 
        xmax = 0.9 
        intervals: size = 4 
        intervals [1]:
            xmin = 0 
            xmax = 0.25 
            text = "" 
        intervals [2]:
            xmin = 0.25 
            xmax = 0.5 
            text = "s" 
        intervals [3]:
            xmin = 0.5 
            xmax = 0.75 
            text = "iː" 
        intervals [4]:
            xmin = 0.75 
            xmax = 0.9 
            text = "sil" 
)";

const char* kShort = R"(File type = "ooTextFile"
Object class = "TextGrid"

0
0.9
<exists>
2
"TextTier"
"events"
0
0.9
1
0.3
"click"
"IntervalTier"
"phones"
0
0.9
4
0
0.25
""
0.25
0.5
"s"
0.5
0.75
"iː"
0.75
0.9
"sil"
)";

std::string utf16(const std::string& utf8, bool little) {  // BMP only, with a byte-order mark
  std::string out = little ? std::string("\xFF\xFE") : std::string("\xFE\xFF");
  for (size_t i = 0; i < utf8.size();) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    uint32_t cp = c;
    int n = 1;
    if (c >= 0xE0) cp = c & 0x0F, n = 3;
    else if (c >= 0xC0) cp = c & 0x1F, n = 2;
    for (int k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(utf8[i + k]) & 0x3F);
    i += n;
    const char lo = static_cast<char>(cp & 0xFF), hi = static_cast<char>(cp >> 8);
    out += little ? std::string{lo, hi} : std::string{hi, lo};
  }
  return out;
}

void expect_see(const std::vector<LabelInterval>& iv) {
  ASSERT_EQ(iv.size(), 4u);
  const std::vector<std::string> labels = {"", "s", "iː", "sil"};
  const std::vector<double> starts = {0, 0.25, 0.5, 0.75}, ends = {0.25, 0.5, 0.75, 0.9};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(iv[i].label, labels[i]);
    EXPECT_DOUBLE_EQ(iv[i].start, starts[i]);
    EXPECT_DOUBLE_EQ(iv[i].end, ends[i]);
  }
}

}  // namespace

TEST(CorpusTextGrid, LongAndShortFormatsGiveTheSameIntervals) {
  std::vector<Problem> p;
  const auto a = parse_textgrid("a.TextGrid", kLong, "phones", &p);
  const auto b = parse_textgrid("b.TextGrid", kShort, "phones", &p);
  EXPECT_TRUE(p.empty()) << p[0].str();
  expect_see(a);
  expect_see(b);
  EXPECT_EQ(a[2].line, 36);  // the line of the interval's text in the long format
  const auto w = parse_textgrid("a.TextGrid", kLong, "words", &p);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].label, "see \"it\"");  // "" inside a string is a quote
}

TEST(CorpusTextGrid, Utf8BomAndUtf16LittleAndBigEndian) {
  std::vector<Problem> p;
  expect_see(parse_textgrid("bom.TextGrid", "\xEF\xBB\xBF" + std::string(kLong), "phones", &p));
  expect_see(parse_textgrid("le.TextGrid", utf16(kLong, true), "phones", &p));
  expect_see(parse_textgrid("be.TextGrid", utf16(kShort, false), "phones", &p));
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(decode_text(utf16("aː", true)), "aː");
}

TEST(CorpusTextGrid, WithoutTheTierIsOneLineNamingTheTiers) {
  std::vector<Problem> p;
  EXPECT_TRUE(parse_textgrid("x.TextGrid", kLong, "phone", &p).empty());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].str(), "x.TextGrid: no interval tier named 'phone' (tiers: 'words', 'phones'; choose one with --tier)");
  p.clear();
  EXPECT_TRUE(parse_textgrid("y.TextGrid", "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n0\n1\n<exists>\n1\n"
                                           "\"IntervalTier\"\n\"phones\"\n0\n1\n2\n0\n0.5\n\"a\"\n",
                             "phones", &p).empty());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].message.find("unreadable TextGrid: ends before"), std::string::npos) << p[0].str();
}

TEST(CorpusBuckeye, HeaderColorColumnMarksAndZeroLengthEntries) {
  const std::string text =
      "signal s0101a\r\ntype 0\r\ncolor 121\r\ncomment created using WavEd\r\nfont -misc-*-bold-*-*-*-15-*\r\n"
      "separator ;\r\nnfields 1\r\n#   \r\n"
      "    0.250000  122 {B_TRANS}\r\n"
      "    0.400000  122 SIL\r\n"
      "    0.400000  122 <SIL>\r\n"  // zero length: a mark, skipped
      "    0.550000  121 aan; *\r\n"
      "    0.700000  122 \r\n"       // no label: kept empty (silence at prepare)
      "    0.800000  122 VOCNOISE\r\n";
  std::vector<Problem> p;
  const auto iv = parse_buckeye_phones("s0101a.phones", text, &p);
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(iv.size(), 5u);
  EXPECT_EQ(iv[0].label, "{B_TRANS}");
  EXPECT_DOUBLE_EQ(iv[0].start, 0.0);
  EXPECT_DOUBLE_EQ(iv[0].end, 0.25);
  EXPECT_EQ(iv[1].label, "SIL");
  EXPECT_EQ(iv[2].label, "aan");
  EXPECT_DOUBLE_EQ(iv[2].start, 0.4);
  EXPECT_EQ(iv[2].line, 12);
  EXPECT_EQ(iv[3].label, "");
  EXPECT_EQ(iv[4].label, "VOCNOISE");
  EXPECT_DOUBLE_EQ(iv[4].start, 0.7);
  EXPECT_TRUE(parse_buckeye_phones("bad.phones", "signal x\n 0.1 122 a\n", &p).empty());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].str(), "bad.phones: no '#' line ending the header (not a Buckeye .phones file?)");
}

TEST(CorpusKaldi, SegmentsUtt2spkAndCtmRelativeToTheUtterance) {
  testutil::TempDir d;
  testutil::write_audio(d.str("rec1.wav"), testutil::test_signal(32000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("data/wav.scp"), "rec1 " + d.str("rec1.wav") + "\nrec2 sox x.wav -t wav - |\n");
  testutil::write_text(d.str("data/segments"), "u1 rec1 0.00 0.80\nu2 rec1 0.80 2.00\nu3 rec2 0 1\n");
  testutil::write_text(d.str("data/utt2spk"), "u1 spkA\nu2 spkA\nu3 spkB\n");
  testutil::write_text(d.str("data/phones.ctm"), "u1 1 0.00 0.30 SIL\nu1 1 0.30 0.50 AH0_B\n"
                                                 "u2 1 0.0 0.6 S_S\nu2 1 0.6 0.6 SIL\nu3 1 0 1 SIL\n");
  std::vector<Problem> p;
  EXPECT_EQ(detect_corpus_format(d.str("data")), CorpusFormat::kaldi);
  auto es = scan_corpus(d.str("data"), CorpusFormat::kaldi, {}, &p);
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(es.size(), 3u);
  EXPECT_EQ(es[0].id, "u1");
  EXPECT_EQ(es[0].speaker, "spkA");
  EXPECT_DOUBLE_EQ(es[1].seg_start, 0.8);
  EXPECT_DOUBLE_EQ(es[1].seg_end, 2.0);
  EXPECT_TRUE(es[0].intervals.empty());  // the CTM's intervals wait on disk (IntervalSpill) for read_labels
  EXPECT_EQ(es[0].label_kind, LabelFileKind::spill);
  for (auto& e : es) read_labels(e, {});
  ASSERT_EQ(es[0].intervals.size(), 2u);
  EXPECT_EQ(es[0].intervals[1].label, "AH0");  // word-position suffix dropped
  EXPECT_DOUBLE_EQ(es[0].intervals[1].end, 0.8);
  EXPECT_EQ(es[1].intervals[0].label, "S");
  ASSERT_EQ(es[2].problems.size(), 1u);  // the pipe: one line, the utterance unusable
  EXPECT_EQ(es[2].problems[0].str(), d.str("data/wav.scp") + ":2: 'rec2' is a command ('... |'), not a file: "
                                     "timitseg reads audio files only (write the audio out, e.g. with wav-copy)");
  EXPECT_EQ(es[0].problems.size(), 0u);
  EXPECT_EQ(es[1].problems.size(), 0u);
}

// The CTM is streamed into a spill file, not held: an utterance's lines need
// not be together (its intervals in file order), a UTF-8 byte-order mark and
// UTF-16 read as decode_text reads them, each line's number kept.
TEST(CorpusKaldi, CtmLinesInAnyOrderAndEncodingReadBackInFileOrder) {
  testutil::TempDir d;
  testutil::write_audio(d.str("data/a.wav"), testutil::test_signal(32000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("data/wav.scp"), "rec1 a.wav\n");
  testutil::write_text(d.str("data/segments"), "u1 rec1 0.00 1.00\nu2 rec1 1.00 2.00\n");
  const std::string ctm = "u1 1 0.00 0.30 SIL\r\nu2 1 0.0 0.5 S_B\nu1 1 0.30 0.70 AH0_I\n\nu2 1 0.5 0.5 SIL\n";
  std::string utf16 = "\xFF\xFE";
  for (char c : ctm) utf16 += c, utf16 += '\0';
  for (const std::string& bytes : {ctm, "\xEF\xBB\xBF" + ctm, utf16}) {
    testutil::write_text(d.str("data/phones.ctm"), bytes);
    std::vector<Problem> p;
    auto es = scan_corpus(d.str("data"), CorpusFormat::kaldi, {}, &p);
    EXPECT_TRUE(p.empty());
    ASSERT_EQ(es.size(), 2u);
    for (auto& e : es) read_labels(e, {});
    ASSERT_EQ(es[0].intervals.size(), 2u);
    ASSERT_EQ(es[1].intervals.size(), 2u);
    EXPECT_EQ(es[0].intervals[0].label, "SIL");
    EXPECT_EQ(es[0].intervals[1].label, "AH0");
    EXPECT_DOUBLE_EQ(es[0].intervals[1].start, 0.3);
    EXPECT_DOUBLE_EQ(es[0].intervals[1].end, 1.0);
    EXPECT_EQ(es[0].intervals[1].line, 3);
    EXPECT_EQ(es[1].intervals[0].label, "S");
    EXPECT_EQ(es[1].intervals[1].label, "SIL");
    EXPECT_EQ(es[1].intervals[1].line, 5);
    EXPECT_TRUE(es[0].problems.empty());
    EXPECT_TRUE(es[1].problems.empty());
  }
}

// One wav.scp parser for the Kaldi corpus reader and align --wav-scp
// (read_wav_scp, data/transcripts.h): ids, paths with blanks, pipes, comments,
// UTF-16; each consumer's own rules on top.
TEST(CorpusKaldi, OneWavScpParserForTheCorpusAndAlign) {
  const std::string text = "# recordings\n\nrec1 wav/a b.wav  \r\nrec2 sox x.flac -t wav - |\n  rec3\trel/c.wav\nrec4\n";
  for (const std::string& bytes : {text, [&] {  // UTF-16 LE with a byte-order mark, as decode_text reads
         std::string o = "\xFF\xFE";
         for (char c : text) o += c, o += '\0';
         return o;
       }()}) {
    const std::vector<WavScpLine> l = parse_wav_scp(bytes);
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l[0].line, 3);
    EXPECT_EQ(l[0].id, "rec1");
    EXPECT_EQ(l[0].audio, "wav/a b.wav");  // the rest of the line, blanks inside kept
    EXPECT_FALSE(l[0].pipe);
    EXPECT_EQ(l[1].audio, "sox x.flac -t wav - |");
    EXPECT_TRUE(l[1].pipe);
    EXPECT_EQ(l[2].line, 5);
    EXPECT_EQ(l[2].id, "rec3");
    EXPECT_EQ(l[2].audio, "rel/c.wav");
    EXPECT_EQ(l[3].id, "rec4");
    EXPECT_EQ(l[3].audio, "");
  }
  testutil::TempDir d;
  testutil::write_text(d.str("ok.scp"), "# utterances\nu1 /data/u1.wav\nu2\tu2.flac\n");
  EXPECT_EQ(read_wav_scp(d.str("ok.scp")),
            (std::map<std::string, std::string>{{"u1", "/data/u1.wav"}, {"u2", "u2.flac"}}));
  auto error_of = [&](const std::string& scp) {
    testutil::write_text(d.str("bad.scp"), scp);
    try {
      read_wav_scp(d.str("bad.scp"));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string at = "--wav-scp " + d.str("bad.scp") + ":2: ";
  EXPECT_EQ(error_of("u1 a.wav\nu2\n"), at + "expected 'UTTID AUDIO', got only 'u2'");
  EXPECT_EQ(error_of("u1 a.wav\nu2 sox b.wav -t wav -\n"),
            at + "'u2' is given by a command; only an audio file path is supported");
  EXPECT_EQ(error_of("u1 a.wav\nu2 b.wav |\n"), at + "'u2' is given by a command; only an audio file path is supported");
  EXPECT_EQ(error_of("u1 a.wav\nx/u2 b.wav\n"), at + "utterance id 'x/u2' cannot name an output file (no '/', '.' or '..')");
  EXPECT_EQ(error_of("u1 a.wav\nu1 b.wav\n"), at + "utterance id 'u1' given twice");
}

TEST(CorpusManifest, CsvWithQuotedCommasAndInlineSegments) {
  const std::string csv = "audio,speaker,split,segments\n"
                          "\"a, b.wav\",s1,train,0 0.5 sil; 0.5 1.0 a\n"
                          "\"say \"\"hi\"\".wav\",\"s,2\",dev,\"0 1 sil\"\n";
  std::vector<Problem> p;
  const auto rows = parse_csv("m.csv", csv, &p);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].fields[0], "a, b.wav");
  EXPECT_EQ(rows[2].fields[0], "say \"hi\".wav");
  EXPECT_EQ(rows[2].fields[1], "s,2");
  EXPECT_EQ(rows[2].line, 3);
  testutil::TempDir d;
  testutil::write_text(d.str("m/manifest.csv"), csv + "gone.wav,s3,test,0 1 a\n");
  testutil::write_audio(d.str("m/a, b.wav"), testutil::test_signal(16000), 16000, SF_FORMAT_WAV);
  testutil::write_audio(d.str("m/say \"hi\".wav"), testutil::test_signal(16000), 16000, SF_FORMAT_WAV);
  EXPECT_EQ(detect_corpus_format(d.str("m")), CorpusFormat::manifest);
  auto es = scan_corpus(d.str("m"), CorpusFormat::manifest, {}, &p);
  ASSERT_EQ(es.size(), 3u);
  EXPECT_EQ(es[0].id, "a, b");
  EXPECT_EQ(es[0].speaker, "s1");
  EXPECT_EQ(es[0].label_kind, LabelFileKind::spill);  // inline segments wait on disk (IntervalSpill) for read_labels
  EXPECT_TRUE(es[0].intervals.empty());
  for (auto& e : es) read_labels(e, {});
  ASSERT_EQ(es[0].intervals.size(), 2u);
  EXPECT_EQ(es[0].intervals[1].label, "a");
  EXPECT_EQ(es[0].intervals[1].line, 2);
  EXPECT_EQ(es[2].speaker, "s,2");
  ASSERT_TRUE(es[2].split.has_value());
  EXPECT_EQ(*es[2].split, SplitName::dev);
  ASSERT_EQ(es[1].problems.size(), 1u);  // gone.wav
  EXPECT_EQ(es[1].problems[0].str(), d.str("m/manifest.csv") + ":4: audio " + d.str("m/gone.wav") + " is missing");
}

TEST(CorpusManifest, JsonLinesWithLabelFilesAndSegments) {
  testutil::TempDir d;
  testutil::write_audio(d.str("a.wav"), testutil::test_signal(16000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("a.lab"), "0 0.4 sil\n0.4 1.0 a\n");
  testutil::write_text(d.str("m.jsonl"),
                       "{\"audio\": \"a.wav\", \"speaker\": \"x\", \"labels\": \"a.lab\"}\n"
                       "{\"audio\": \"a.wav\", \"id\": \"a2\", \"speaker\": \"x\", \"segments\": [[0, 0.5, \"ʃ\"], "
                       "{\"start\": 0.5, \"end\": 1, \"label\": \"a\"}]}\n"
                       "{\"audio\": \"a.wav\", \"speaker\": \"x\" \n");
  std::vector<Problem> p;
  auto es = scan_corpus(d.str("m.jsonl"), CorpusFormat::manifest, {}, &p);
  ASSERT_EQ(es.size(), 3u);
  for (auto& e : es) read_labels(e, {});
  EXPECT_EQ(es[0].id, "a");
  EXPECT_TRUE(es[0].problems.empty());
  ASSERT_EQ(es[0].intervals.size(), 2u);
  EXPECT_DOUBLE_EQ(es[0].intervals[1].start, 0.4);
  EXPECT_EQ(es[1].intervals[0].label, "ʃ");
  ASSERT_FALSE(es[2].problems.empty());
  EXPECT_NE(es[2].problems[0].str().find("m.jsonl:3: not a JSON object"), std::string::npos);
}

TEST(CorpusIntervals, OverlapUnsortedReversedAndPastTheEndAreOneLineEach) {
  auto first = [](const std::vector<LabelInterval>& iv, double secs) {
    std::vector<Problem> p;
    check_intervals("f.lab", iv, secs, &p);
    return p.size() == 1 ? p[0].str() : std::to_string(p.size()) + " problems";
  };
  EXPECT_EQ(first({{0, 0.5, "a", 1}, {0.4, 0.9, "b", 2}, {0.3, 0.2, "c", 3}}, -1),
            "f.lab:2: 'b' [0.4, 0.9) s: overlaps the previous interval (line 1, ends at 0.5 s)");
  EXPECT_EQ(first({{0.5, 0.6, "a", 1}, {0.1, 0.2, "b", 2}}, -1),
            "f.lab:2: 'b' [0.1, 0.2) s: unsorted (starts before the previous interval, line 1)");
  EXPECT_EQ(first({{0.5, 0.5, "a", 7}}, -1), "f.lab:7: 'a' [0.5, 0.5) s: start is not before end");
  EXPECT_EQ(first({{0, 0.5, "a", 1}, {0.5, 1.2, "b", 2}}, 1.0),
            "f.lab:2: 'b' [0.5, 1.2) s: past the end of the audio (1 s)");
  EXPECT_EQ(first({}, -1), "f.lab: no labels");
  EXPECT_EQ(first({{0, 0.5, "a", 1}, {0.5, 1.0, "b", 2}}, 1.0), "0 problems");
}

TEST(CorpusSplits, BySpeakerIsSeededDisjointAndKeepsTrain) {
  std::vector<std::string> spk;
  for (int i = 0; i < 20; ++i) spk.push_back("s" + std::to_string(i));
  const auto a = speaker_splits(spk, 0.1, 0.1, 13);
  std::vector<std::string> rev(spk.rbegin(), spk.rend());
  EXPECT_EQ(speaker_splits(rev, 0.1, 0.1, 13), a);  // the order given does not matter
  std::map<std::string, int> n;
  for (const auto& [s, split] : a) ++n[split];
  EXPECT_EQ(n["dev"], 2);
  EXPECT_EQ(n["test"], 2);
  EXPECT_EQ(n["train"], 16);
  EXPECT_NE(speaker_splits(spk, 0.1, 0.1, 14), a);
  std::map<std::string, int> m;
  for (const auto& [s, split] : speaker_splits({"a", "b", "c"}, 0.1, 0.1, 13)) ++m[split];
  EXPECT_EQ(m["train"], 1);
  EXPECT_EQ(m["dev"], 1);
  EXPECT_EQ(m["test"], 1);
  for (const auto& [s, split] : speaker_splits({"a", "b"}, 0.1, 0.1, 13)) EXPECT_EQ(split, "train");
}

TEST(CorpusSplits, SplitFileLinesAndItsErrors) {
  testutil::TempDir d;
  testutil::write_text(d.str("s.txt"), "# speakers\nspkA train\n\nspkB  test\n");
  const auto s = read_split_file(d.str("s.txt"));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1], (std::pair<std::string, std::string>{"spkB", "test"}));
  testutil::write_text(d.str("bad.txt"), "spkA train\nspkA dev\n");
  try {
    read_split_file(d.str("bad.txt"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), d.str("bad.txt") + ":2: speaker spkA is already on line 1 (a speaker is in one split)");
  }
  testutil::write_text(d.str("bad2.txt"), "spkA valid\n");
  EXPECT_THROW(read_split_file(d.str("bad2.txt")), std::runtime_error);
}

TEST(CorpusDetect, OneLayoutOrOneLineNamingThem) {
  testutil::TempDir d;
  testutil::write_text(d.str("tg/s1/u1.TextGrid"), kShort);
  EXPECT_EQ(detect_corpus_format(d.str("tg")), CorpusFormat::textgrid);
  testutil::write_text(d.str("tg/s1/u1.phones"), "#\n");
  try {
    detect_corpus_format(d.str("tg"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--corpus " + d.str("tg") + ": fits several formats (textgrid, buckeye); choose "
                                     "one with --format");
  }
  EXPECT_THROW(parse_corpus_format("praat"), std::invalid_argument);
}

TEST(CorpusManifest, SplitColumnIsTrainDevTestOrEmpty) {
  testutil::TempDir d;
  for (const char* f : {"m/a.wav", "m/b.wav", "m/c.wav"})
    testutil::write_audio(d.str(f), testutil::test_signal(16000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("m/manifest.csv"),
                       "audio,speaker,split,segments\na.wav,s1,test,0 1 a\nb.wav,s2,core-test,0 1 a\nc.wav,s3,,0 1 a\n");
  std::vector<Problem> p;
  const auto es = scan_corpus(d.str("m"), CorpusFormat::manifest, {}, &p);
  ASSERT_EQ(es.size(), 3u);
  ASSERT_TRUE(es[0].split.has_value());
  EXPECT_EQ(*es[0].split, SplitName::test);
  EXPECT_TRUE(es[0].problems.empty());
  EXPECT_FALSE(es[1].split.has_value());
  ASSERT_EQ(es[1].problems.size(), 1u);
  EXPECT_EQ(es[1].problems[0].str(), d.str("m/manifest.csv") + ":3: split 'core-test' is not train, dev or test");
  EXPECT_FALSE(es[2].split.has_value());  // no split: prepare splits by speaker
  EXPECT_TRUE(es[2].problems.empty());
}
