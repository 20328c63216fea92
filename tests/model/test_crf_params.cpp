// ParamLayout::crf() (model/crf_params.h): each member of the typed view is
// the checkpoint tensor of that name in the flat layout. Oracle: the file
// format written out here by hand (names, shapes, order after the encoder),
// independent of the table in model/crf_params.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "model/params.h"

using namespace timitseg::model;

namespace {

struct Expected {
  const CrfTensor CrfParamView::*member;
  const char* name;
  std::vector<int64_t> shape;
};

ModelDims dims(bool onset, bool lognormal) {
  ModelDims d;
  d.input_dim = 5;
  d.hidden_dim = 6;
  d.num_layers = 2;
  d.num_classes = 4;
  d.max_duration = 3;
  d.onset = onset;
  d.duration_lognormal = lognormal;
  return d;
}

// The CRF tensors of a checkpoint, in file-format order, for dims d (W 6, C 4, K 3).
std::vector<Expected> expected(const ModelDims& d) {
  std::vector<Expected> e = {{&CrfParamView::projection_weight, "crf.projection.weight", {4, 6}},
                             {&CrfParamView::projection_bias, "crf.projection.bias", {4}}};
  if (d.onset) {
    e.push_back({&CrfParamView::onset_weight, "crf.onset_projection.weight", {4, 6}});
    e.push_back({&CrfParamView::onset_bias, "crf.onset_projection.bias", {4}});
  }
  e.push_back({&CrfParamView::transition, "crf.transition", {4, 4}});
  e.push_back({&CrfParamView::duration_bias, "crf.duration_bias", {3, 4}});
  e.push_back({&CrfParamView::start, "crf.start", {4}});
  e.push_back({&CrfParamView::end, "crf.end", {4}});
  if (d.duration_lognormal) e.push_back({&CrfParamView::duration_lognormal, "crf.duration_lognormal", {3, 4}});
  return e;
}

}  // namespace

TEST(CrfParams, ViewIsTheLayoutsTensorOfEachName) {
  for (bool onset : {false, true})
    for (bool lognormal : {false, true}) {
      const ModelDims d = dims(onset, lognormal);
      const ParamLayout layout(d);
      const CrfParamView& crf = layout.crf();
      const std::vector<Expected> want = expected(d);
      // the CRF tensors are the layout's last ones, in this order
      const std::vector<ParamInfo>& all = layout.params();
      ASSERT_GE(all.size(), want.size());
      const size_t first = all.size() - want.size();
      for (size_t i = 0; i < want.size(); ++i) {
        const ParamInfo& p = all[first + i];
        const CrfTensor& t = crf.*want[i].member;
        SCOPED_TRACE(want[i].name);
        EXPECT_EQ(p.name, want[i].name);
        EXPECT_EQ(p.shape, want[i].shape);
        EXPECT_TRUE(t.present);
        EXPECT_STREQ(t.name, want[i].name);
        EXPECT_EQ(t.offset, p.offset);
        EXPECT_EQ(t.size, p.size);
        EXPECT_STREQ(t.short_name(), want[i].name + 4);  // without "crf."
      }
      EXPECT_EQ(all[first].name.rfind("encoder.", 0), std::string::npos);
      EXPECT_EQ(all[first - 1].name.rfind("encoder.", 0), 0u);
      EXPECT_EQ(layout.crf_structure_begin(), crf.transition.offset);
      EXPECT_EQ(crf.onset_weight.present, onset);
      EXPECT_EQ(crf.onset_bias.present, onset);
      EXPECT_EQ(crf.duration_lognormal.present, lognormal);
    }
}

TEST(CrfParams, AccessorsPointIntoTheBufferAndRefuseAbsentTensors) {
  const ParamLayout layout(dims(false, false));
  std::vector<float> params(layout.total());
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);
  const std::vector<float>& cparams = params;
  const CrfParamView& crf = layout.crf();
  EXPECT_EQ(crf.end.in(params), params.data() + layout.total() - 4);  // crf.end [C]: the last tensor
  EXPECT_EQ(*crf.transition.in(cparams), static_cast<float>(layout.get("crf.transition").offset));
  std::vector<double> grad(layout.total());
  EXPECT_EQ(crf.duration_bias.in(grad.data()), grad.data() + layout.get("crf.duration_bias").offset);
  try {
    crf.onset_weight.in(params);
    FAIL() << "no throw";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "model: this model has no crf.onset_projection.weight");
  }
  EXPECT_THROW(crf.duration_lognormal.in(cparams), std::logic_error);
  const std::array<const CrfTensor*, 4> neg = crf.may_hold_neg_inf();
  EXPECT_STREQ(neg[0]->name, "crf.transition");
  EXPECT_STREQ(neg[3]->name, "crf.end");
}

TEST(CrfParams, NamesWithoutALayoutAndCrfDims) {
  const CrfParamView& n = CrfParamView::names();
  EXPECT_STREQ(n.duration_bias.name, "crf.duration_bias");
  EXPECT_STREQ(n.start.short_name(), "start");
  EXPECT_STREQ(n.onset_bias.name, "crf.onset_projection.bias");
  EXPECT_FALSE(n.transition.present);
  const timitseg::crf::Dims cd = dims(true, false).crf_dims(7, 11);
  EXPECT_EQ(cd.B, 7);
  EXPECT_EQ(cd.T, 11);
  EXPECT_EQ(cd.K, 3);
  EXPECT_EQ(cd.C, 4);
}
