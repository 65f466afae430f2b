// expect_error.h: a test's check that f throws a qkv::Error whose message
// names what it should.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "qkv/error.h"

namespace qkv {

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a qkv::Error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(needle));
  }
}

}  // namespace qkv
