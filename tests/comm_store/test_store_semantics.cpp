// One semantics suite, run against every Store: MemoryStore, TcpStore, and
// PrefixStore over each. A second handle (`other`) on the same keys plays another
// rank, so cross-client visibility and wake-ups are tested too.
#include <gtest/gtest.h>

#include <thread>

#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/error.h"
#include "tessera/core/timer.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

Bytes b(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string s(const Bytes& v) { return std::string(v.begin(), v.end()); }

class StoreSemantics : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& kind = GetParam();
    std::shared_ptr<Store> inner_a, inner_b;
    if (kind.find("tcp") != std::string::npos) {
      server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "tok");
      inner_a = std::make_shared<TcpStore>("127.0.0.1", server_->port(), "tok", 5s);
      inner_b = std::make_shared<TcpStore>("127.0.0.1", server_->port(), "tok", 5s);
    } else {
      inner_a = inner_b = std::make_shared<MemoryStore>();
    }
    if (kind.rfind("prefix", 0) == 0) {
      store_ = std::make_shared<PrefixStore>("grp", inner_a);
      other_ = std::make_shared<PrefixStore>("grp", inner_b);
    } else {
      store_ = inner_a;
      other_ = inner_b;
    }
    store_->set_timeout(5s);
    other_->set_timeout(5s);
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> other_;
};

TEST_P(StoreSemantics, SetGetOverwriteAndBinaryValues) {
  store_->set("a", b("1"));
  EXPECT_EQ(s(other_->get("a")), "1");
  other_->set("a", b("two"));
  EXPECT_EQ(s(store_->get("a")), "two");
  Bytes binary = {0, 255, 0, 10, 13, 0};
  store_->set("bin", binary);
  EXPECT_EQ(other_->get("bin"), binary);
  store_->set("empty", Bytes{});
  EXPECT_TRUE(other_->get("empty").empty());
  EXPECT_TRUE(other_->check({"empty"}));
  Bytes big(1 << 20, 7);
  store_->set("big", big);
  EXPECT_EQ(other_->get("big"), big);
}

TEST_P(StoreSemantics, GetBlocksUntilAnotherClientSets) {
  Stopwatch watch;
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    other_->set_string("late", "here");
  });
  EXPECT_EQ(store_->get_string("late"), "here");
  setter.join();
  EXPECT_GE(watch.seconds(), 0.09);
}

TEST_P(StoreSemantics, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(store_->add("n", 5), 5);
  EXPECT_EQ(other_->add("n", -7), -2);
  EXPECT_EQ(store_->add("n", 0), -2);
  EXPECT_EQ(store_->get_string("n"), "-2");
  store_->set_string("text", "abc");
  try {
    other_->add("text", 1);
    FAIL() << "add() on a non-integer value must throw";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("non-integer"), std::string::npos) << e.what();
  }
  // The store stays usable after the error.
  EXPECT_EQ(other_->add("n", 2), 0);
}

TEST_P(StoreSemantics, CompareSetFollowsC10d) {
  // Absent key, empty expected: sets.
  EXPECT_EQ(s(store_->compare_set("c", {}, b("x"))), "x");
  EXPECT_EQ(other_->get_string("c"), "x");
  // Matching expected: swaps.
  EXPECT_EQ(s(other_->compare_set("c", b("x"), b("y"))), "y");
  // Mismatch: returns the current value, unchanged.
  EXPECT_EQ(s(store_->compare_set("c", b("x"), b("z"))), "y");
  EXPECT_EQ(store_->get_string("c"), "y");
  // Absent key, non-empty expected: returns expected, key stays absent.
  EXPECT_EQ(s(store_->compare_set("absent", b("e"), b("d"))), "e");
  EXPECT_FALSE(other_->check({"absent"}));
}

TEST_P(StoreSemantics, DeleteAndCheck) {
  store_->set_string("d1", "v");
  store_->set_string("d2", "v");
  EXPECT_TRUE(other_->check({"d1", "d2"}));
  EXPECT_FALSE(other_->check({"d1", "nope"}));
  EXPECT_TRUE(other_->check({}));
  EXPECT_TRUE(other_->delete_key("d1"));
  EXPECT_FALSE(store_->delete_key("d1"));
  EXPECT_FALSE(store_->check({"d1"}));
  EXPECT_TRUE(store_->check({"d2"}));
}

TEST_P(StoreSemantics, WaitReturnsWhenEveryKeyExists) {
  std::thread setter([&] {
    other_->set_string("w1", "1");
    std::this_thread::sleep_for(50ms);
    other_->add("w2", 1);
  });
  store_->wait({"w1", "w2"}, 5000ms);
  setter.join();
  EXPECT_TRUE(store_->check({"w1", "w2"}));
}

TEST_P(StoreSemantics, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->set_string("here", "1");
  Stopwatch watch;
  try {
    store_->wait({"here", "missing_a", "missing_b"}, 300ms);
    FAIL() << "wait() must time out";
  } catch (const StoreError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("timed out after 0.3 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing_a"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing_b"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("here,"), std::string::npos) << msg;
  }
  EXPECT_GE(watch.seconds(), 0.29);
  EXPECT_LT(watch.seconds(), 2.0);
  // Still usable after a timeout.
  EXPECT_EQ(store_->get_string("here"), "1");
}

TEST_P(StoreSemantics, GetTimesOutWithTheStoreTimeout) {
  store_->set_timeout(200ms);
  Stopwatch watch;
  try {
    store_->get("never");
    FAIL() << "get() must time out";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  EXPECT_GE(watch.seconds(), 0.19);
  EXPECT_LT(watch.seconds(), 2.0);
}

TEST_P(StoreSemantics, NumKeysCountsNewKeys) {
  int64_t before = store_->num_keys();
  store_->set_string("k1", "v");
  other_->add("k2", 3);
  store_->set_string("k1", "again");  // overwrite: no new key
  EXPECT_EQ(other_->num_keys(), before + 2);
  store_->delete_key("k1");
  EXPECT_EQ(store_->num_keys(), before + 1);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreSemantics,
                         ::testing::Values("memory", "tcp", "prefix_memory", "prefix_tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessera::comm
