// The link profile (BRAID_LINK_PROFILE): a good file round-trips exactly; corrupt, truncated,
// oversized and absurd files are refused with a message naming the problem, never a crash; a
// missing file is not an error.
#include "algorithms/link_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

namespace braid {
namespace {

constexpr const char* kGood =
    "# a comment\n"
    "version 1\n"
    "\n"
    "intra.alpha_s 2.5e-06\n"
    "intra.beta_bytes_s 8100000000\n"
    "  inter.alpha_s\t2.5e-05  \n"
    "inter.beta_bytes_s 1.2e+09\n";

std::string ErrorOf(std::string_view text) {
  auto r = ParseLinkProfile(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(LinkProfileParse, GoodFile) {
  auto p = ParseLinkProfile(kGood);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->holds(LinkClass::kIntraNode));
  EXPECT_TRUE(p->holds(LinkClass::kInterNode));
  EXPECT_EQ(p->of(LinkClass::kIntraNode).alpha_s, 2.5e-06);
  EXPECT_EQ(p->of(LinkClass::kIntraNode).beta_bytes_s, 8.1e9);
  EXPECT_EQ(p->of(LinkClass::kInterNode).alpha_s, 2.5e-05);
  EXPECT_EQ(p->of(LinkClass::kInterNode).beta_bytes_s, 1.2e9);
}

TEST(LinkProfileParse, OneClassIsEnough) {
  auto p = ParseLinkProfile("version 1\nintra.alpha_s 3e-6\nintra.beta_bytes_s 4e9\n");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->holds(LinkClass::kIntraNode));
  EXPECT_FALSE(p->holds(LinkClass::kInterNode));
}

TEST(LinkProfileFormat, RoundTripsExactly) {
  LinkProfile p;
  p.set(LinkClass::kIntraNode, {1.0 / 3 * 1e-5, 7.123456789012345e9});
  p.set(LinkClass::kInterNode, {std::nextafter(2.5e-5, 1.0), 1.1e9 + 0.5});
  const std::string text = FormatLinkProfile(p);
  auto back = ParseLinkProfile(text);
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  for (LinkClass c : {LinkClass::kIntraNode, LinkClass::kInterNode}) {
    EXPECT_EQ(back->of(c).alpha_s, p.of(c).alpha_s);
    EXPECT_EQ(back->of(c).beta_bytes_s, p.of(c).beta_bytes_s);
  }
  LinkProfile only_inter;
  only_inter.set(LinkClass::kInterNode, {2e-5, 1e9});
  EXPECT_EQ(FormatLinkProfile(only_inter),
            "version 1\ninter.alpha_s 2e-05\ninter.beta_bytes_s 1e+09\n");
}

TEST(LinkProfileParse, CorruptFilesNameTheProblem) {
  EXPECT_EQ(ErrorOf(""), "empty profile (no 'version 1' line)");
  EXPECT_EQ(ErrorOf("# only a comment\n"), "empty profile (no 'version 1' line)");
  EXPECT_EQ(ErrorOf("intra.alpha_s 1e-6\n"),
            "line 1: expected 'version 1' first, found 'intra.alpha_s 1e-6'");
  EXPECT_EQ(ErrorOf("version 2\n"), "line 1: version '2' is not supported (only 1)");
  EXPECT_EQ(ErrorOf("version 1\n"), "the profile holds no link class");
  EXPECT_EQ(ErrorOf("version 1\nintra.alpha_s\n"), "line 2: 'intra.alpha_s' has no value");
  EXPECT_EQ(ErrorOf("version 1\nintra.alpha_s abc\n"),
            "line 2: intra.alpha_s 'abc' is not a number");
  EXPECT_EQ(ErrorOf("version 1\nintra.alpha_s 1e-6x\n"),
            "line 2: intra.alpha_s '1e-6x' is not a number");
  EXPECT_EQ(ErrorOf("version 1\nintra.alpha_s 1e-6 2\n"),
            "line 2: intra.alpha_s '1e-6 2' is not a number");
  EXPECT_EQ(ErrorOf("version 1\nintra.gamma 1\n"),
            "line 2: unknown key 'intra.gamma' (keys: intra.alpha_s, intra.beta_bytes_s, "
            "inter.alpha_s, inter.beta_bytes_s)");
  EXPECT_EQ(ErrorOf("version 1\nintra.alpha_s 1e-6\nintra.alpha_s 2e-6\n"),
            "line 3: intra.alpha_s appears twice");
  EXPECT_EQ(ErrorOf(std::string("version 1\nintra.alpha_s 1e-6\0\n", 30)),
            "the profile holds a NUL byte (not a text file)");
  EXPECT_EQ(ErrorOf("version 1\n\x01\xff\xfe garbage\n"),
            "line 2: unknown key '\?\?\?' (keys: intra.alpha_s, intra.beta_bytes_s, inter.alpha_s, "
            "inter.beta_bytes_s)");
}

TEST(LinkProfileParse, TruncatedFiles) {
  const std::string good = kGood;
  // Cut after "intra.alpha_s 2.5e-0": a number still, so only the missing newline tells.
  const size_t cut = good.find("2.5e-06") + 6;
  EXPECT_EQ(ErrorOf(good.substr(0, cut)), "line 4: the file ends inside this line (truncated?)");
  // Cut after a whole line: inter has its alpha but not its beta.
  EXPECT_EQ(ErrorOf(good.substr(0, good.find("inter.beta"))),
            "inter has alpha_s but no beta_bytes_s (truncated?)");
  // Every prefix is refused or parses to believable values: never a crash.
  for (size_t n = 0; n <= good.size(); ++n) {
    auto p = ParseLinkProfile(good.substr(0, n));
    if (!p.ok()) continue;
    for (int c = 0; c < kNumCalibratedClasses; ++c)
      if (p->has[c]) {
        EXPECT_TRUE(CheckLinkParams(p->params[c]).ok()) << n;
      }
  }
}

TEST(LinkProfileParse, AbsurdValuesAreRefused) {
  auto one = [](const char* alpha, const char* beta) {
    return ErrorOf(std::string("version 1\nintra.alpha_s ") + alpha + "\nintra.beta_bytes_s " +
                   beta + "\n");
  };
  EXPECT_EQ(one("0", "1e9"), "intra: alpha 0 s is outside [1e-09, 1] s");
  EXPECT_EQ(one("-1e-6", "1e9"), "intra: alpha -1e-06 s is outside [1e-09, 1] s");
  EXPECT_EQ(one("nan", "1e9"), "intra: alpha nan s is outside [1e-09, 1] s");
  EXPECT_EQ(one("inf", "1e9"), "intra: alpha inf s is outside [1e-09, 1] s");
  EXPECT_EQ(one("1e-6", "0"), "intra: beta 0 bytes/s is outside [1e+05, 1e+13] bytes/s");
  EXPECT_EQ(one("1e-6", "-5e9"), "intra: beta -5e+09 bytes/s is outside [1e+05, 1e+13] bytes/s");
  EXPECT_EQ(one("1e-6", "1e300"), "intra: beta 1e+300 bytes/s is outside [1e+05, 1e+13] bytes/s");
  EXPECT_EQ(one("1e-6", "1e999"), "line 3: intra.beta_bytes_s '1e999' is not a number");
  EXPECT_EQ(one("1e-6", "nan"), "intra: beta nan bytes/s is outside [1e+05, 1e+13] bytes/s");
}

TEST(LinkProfileCheck, BoundsAndNaN) {
  EXPECT_TRUE(CheckLinkParams({2e-6, 8e9}).ok());
  EXPECT_FALSE(CheckLinkParams({0, 8e9}).ok());
  EXPECT_FALSE(CheckLinkParams({2e-6, -1}).ok());
  EXPECT_FALSE(CheckLinkParams({std::numeric_limits<double>::quiet_NaN(), 8e9}).ok());
  EXPECT_FALSE(CheckLinkParams({2e-6, std::numeric_limits<double>::quiet_NaN()}).ok());
  EXPECT_FALSE(CheckLinkParams({2e-6, std::numeric_limits<double>::infinity()}).ok());
}

TEST(LinkProfileParse, OversizedTextAndLines) {
  EXPECT_EQ(ErrorOf(std::string(kMaxLinkProfileBytes + 1, '#')),
            "the profile has 4097 bytes, more than the 4096 a profile may have");
  EXPECT_EQ(ErrorOf("version 1\n#" + std::string(300, 'x') + "\n"),
            "line 2: longer than 256 bytes");
}

class LinkProfileFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-link-profile-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/profile";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }
  std::string dir_, path_;
};

TEST_F(LinkProfileFile, MissingIsNotAnError) {
  auto r = LoadLinkProfile(path_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());
}

TEST_F(LinkProfileFile, SaveThenLoad) {
  LinkProfile p;
  p.set(LinkClass::kIntraNode, {3.25e-6, 6.5e9});
  ASSERT_TRUE(SaveLinkProfile(path_, p).ok());
  auto r = LoadLinkProfile(path_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((**r).of(LinkClass::kIntraNode).alpha_s, 3.25e-6);
  EXPECT_EQ((**r).of(LinkClass::kIntraNode).beta_bytes_s, 6.5e9);
  EXPECT_FALSE((**r).holds(LinkClass::kInterNode));
  // No temporary file is left beside it.
  EXPECT_NE(access((path_ + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST_F(LinkProfileFile, CorruptFileNamesTheFile) {
  Write("version 1\nintra.alpha_s -3\nintra.beta_bytes_s 1e9\n");
  auto r = LoadLinkProfile(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "link profile " + path_ + ": intra: alpha -3 s is outside [1e-09, 1] s");
}

TEST_F(LinkProfileFile, OversizedFileIsRefusedWithoutReadingItAll) {
  Write(std::string(1 << 20, 'x'));
  auto r = LoadLinkProfile(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "link profile " + path_ +
                                      ": the profile has 4097 bytes, more than the 4096 a "
                                      "profile may have");
}

TEST_F(LinkProfileFile, DirectoryIsRefused) {
  auto r = LoadLinkProfile(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "link profile " + dir_ + " is not a regular file");
}

TEST_F(LinkProfileFile, SaveIntoMissingDirectoryFails) {
  LinkProfile p;
  p.set(LinkClass::kIntraNode, {3e-6, 6e9});
  Status st = SaveLinkProfile(dir_ + "/no/such/dir/profile", p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("creating " + dir_ + "/no/such/dir/profile.tmp."), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace braid
