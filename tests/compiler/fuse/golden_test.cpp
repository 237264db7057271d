// Golden text of `ein emit softmax --shape 64,1024,512 --stage fused` (the fusion listing and
// the fused graph). Set EIN_ACCEPT_GOLDEN=1 to rewrite the file after an intended change.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/stdlib_graphs.h"

namespace ein {
namespace {

void expect_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(EIN_FUSE_GOLDEN_DIR) + "/" + name;
  if (const char* accept = std::getenv("EIN_ACCEPT_GOLDEN"); accept && std::string(accept) == "1") {
    std::ofstream(path) << text;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with EIN_ACCEPT_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "golden " << path << " differs; EIN_ACCEPT_GOLDEN=1 rewrites it";
}

TEST(FuseGolden, SoftmaxStageFused) {
  const Graph g = softmax_graph({64, 1024, 512});
  const Graph fused = fuse(g);
  expect_golden("softmax_fused.txt", fusion_report(g, fused) + "\n" + dump(fused));
}

}  // namespace
}  // namespace ein
