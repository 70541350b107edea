#include "gpipe/runtime/Progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace gpipe::runtime;

TEST(Progress, ClockTime) {
  EXPECT_EQ(clockTime(0), "0:00:00");
  EXPECT_EQ(clockTime(59.9), "0:00:59");
  EXPECT_EQ(clockTime(3723), "1:02:03");
  EXPECT_EQ(clockTime(-1), "-:--:--");
}

// A terminal gets one line redrawn in place: a carriage return, the bar,
// and a clear to the end of the line (no leftover of a longer line).
TEST(Progress, TerminalBarRedrawsInPlace) {
  std::ostringstream out;
  Progress::Config c;
  c.steps = 4;
  c.stepsPerEpoch = 2;
  c.itemsPerStep = 10;
  c.terminal = true;
  c.columns = 120;
  Progress p(out, c);
  EXPECT_EQ(out.str(), "training steps 1..4 (2 epochs of 2 steps, 10 samples "
                       "a step)\n");
  out.str("");
  p.update(0, 2.0, 0.1, 1.0);
  p.update(1, 1.0, 0.1, 2.0);
  p.update(2, 1.0, 0.1, 3.0);
  p.update(3, 1.0, 0.05, 4.0);
  std::string text = out.str();
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(text.back(), '\n'); // the last line stays
  EXPECT_NE(text.find("\x1b[K"), std::string::npos);
  // Half-way: epoch 2 of 2 begins, half of the bar filled.
  EXPECT_NE(text.find("epoch 1/2 [############------------]  50%  2/4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("epoch 2/2 [########################] 100%  4/4"),
            std::string::npos)
      << text;
  // Elapsed < remaining at 50%: one second per step since the first.
  EXPECT_NE(text.find("0:00:02<0:00:02"), std::string::npos) << text;
  EXPECT_NE(text.find("lr 0.05"), std::string::npos);
  EXPECT_NE(text.find("10 samples/s"), std::string::npos) << text;
}

// Without a terminal: a line at once, then the first step, every
// `lineEvery` steps and the last.
TEST(Progress, PlainLinesAtTheirPace) {
  std::ostringstream out;
  Progress::Config c;
  c.steps = 10;
  c.stepsPerEpoch = 10;
  c.lineEvery = 4;
  Progress p(out, c);
  for (int step = 0; step < 10; ++step)
    p.update(step, 1.0, 0.01, step + 1.0);
  std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text, "training steps 1..10 (1 epoch of 10 steps, 1 samples a "
                  "step)\n"
                  "step 1/10 (10%)  epoch 1/1  loss 1  lr 0.01  1 samples/s  "
                  "elapsed 0:00:01  ETA 0:00:09\n"
                  "step 4/10 (40%)  epoch 1/1  loss 1 (smoothed 1)  lr 0.01  "
                  "1 samples/s  elapsed 0:00:04  ETA 0:00:06\n"
                  "step 8/10 (80%)  epoch 1/1  loss 1 (smoothed 1)  lr 0.01  "
                  "1 samples/s  elapsed 0:00:08  ETA 0:00:02\n"
                  "step 10/10 (100%)  epoch 1/1  loss 1 (smoothed 1)  lr 0.01  "
                  "1 samples/s  elapsed 0:00:10  ETA 0:00:00\n");
}

// A slow run prints at least every maxQuietSeconds.
TEST(Progress, PlainLineAfterAQuietSpell) {
  std::ostringstream out;
  Progress::Config c;
  c.steps = 100;
  c.lineEvery = 50;
  c.maxQuietSeconds = 30;
  Progress p(out, c);
  p.update(0, 1.0, 0.01, 10.0);
  out.str("");
  p.update(1, 1.0, 0.01, 20.0);
  EXPECT_EQ(out.str(), "");
  p.update(2, 1.0, 0.01, 41.0);
  EXPECT_NE(out.str().find("step 3/100"), std::string::npos);
}

// Output that is not a terminal (a log file) hears at once that training
// started, and again after the first step, however long that step takes.
TEST(Progress, PlainLinesStartAtOnce) {
  std::ostringstream out;
  Progress::Config c;
  c.firstStep = 10;
  c.steps = 1000;
  c.stepsPerEpoch = 500;
  c.lineEvery = 50;
  c.itemsPerStep = 2048;
  c.unit = "tokens";
  Progress p(out, c);
  EXPECT_EQ(out.str(), "training steps 11..1000 (2 epochs of 500 steps, 2048 "
                       "tokens a step)\n");
  p.update(10, 5.0, 0.01, 25.0);
  EXPECT_NE(out.str().find("step 11/1000"), std::string::npos) << out.str();
}

// The bar fits the terminal: every redraw is shorter than its width (a
// line as wide as the terminal wraps on some), fields dropped as it
// narrows, plain lines where even the shortest bar does not fit.
TEST(Progress, BarFitsTheTerminal) {
  for (int columns : {200, 100, 80, 60, 40, 30, 20, 8}) {
    std::ostringstream out;
    Progress::Config c;
    c.steps = 20000;
    c.stepsPerEpoch = 2000;
    c.itemsPerStep = 256;
    c.terminal = true;
    c.columns = columns;
    Progress p(out, c);
    for (int step = 0; step < 20000; step += 997)
      p.update(step, 123.456, 0.000123, 3600.0 + step);
    p.finish();
    std::string text = out.str();
    bool plain = text.find('\r') == std::string::npos;
    EXPECT_EQ(plain, columns <= 20) << columns << ": " << text;
    if (plain)
      continue;
    size_t begin = text.find('\r');
    while (begin != std::string::npos) {
      size_t end = text.find("\x1b[K", begin);
      ASSERT_NE(end, std::string::npos);
      EXPECT_LT(static_cast<int>(end - begin - 1), columns)
          << columns << ": " << text.substr(begin + 1, end - begin - 1);
      begin = text.find('\r', end);
    }
    if (columns >= 120)
      EXPECT_NE(text.find("lr 0.000123"), std::string::npos) << text;
    if (columns <= 80)
      EXPECT_EQ(text.find("lr "), std::string::npos) << text;
  }
}

// An evaluation between redraws ends the bar at the last step taken, not
// at the step the bar showed last (it is redrawn ten times a second at
// most).
TEST(Progress, NoStaleBarBeforeAnEvaluation) {
  std::ostringstream out;
  Progress::Config c;
  c.steps = 2000;
  c.stepsPerEpoch = 1000;
  c.terminal = true;
  c.columns = 120;
  Progress p(out, c);
  for (int step = 0; step < 1000; ++step)
    p.update(step, 1.0, 0.01, 1.0 + step * 0.001); // 1 ms a step
  p.interrupt();
  std::string text = out.str();
  size_t lastBar = text.rfind('\r');
  ASSERT_NE(lastBar, std::string::npos);
  EXPECT_NE(text.find("1000/2000", lastBar), std::string::npos)
      << text.substr(lastBar);
  EXPECT_EQ(text.back(), '\n');
}

// A resumed run counts its rate from its own first step, not from step 0,
// and leaves that first (slow) step out once it has a second.
TEST(Progress, RateFromTheResumePoint) {
  std::ostringstream out;
  Progress::Config c;
  c.firstStep = 90;
  c.steps = 100;
  c.itemsPerStep = 32;
  c.unit = "tokens";
  Progress p(out, c);
  p.update(90, 1.0, 0.01, 5.0); // the first step: 5 s (warm-up)
  EXPECT_DOUBLE_EQ(p.rate(5.0), 32 / 5.0);
  p.update(91, 1.0, 0.01, 5.5);
  p.update(92, 1.0, 0.01, 6.0);
  EXPECT_DOUBLE_EQ(p.rate(6.0), 64.0); // 2 steps of 32 in 1 s
  EXPECT_DOUBLE_EQ(p.remainingSeconds(92, 6.0), 3.5);
  EXPECT_NE(out.str().find("tokens/s"), std::string::npos);
}

// The smoothed loss follows the recent steps; a NaN step leaves it as is.
TEST(Progress, SmoothedLoss) {
  std::ostringstream out;
  Progress p(out, Progress::Config{});
  p.update(0, 4.0, 0.01, 1.0);
  EXPECT_DOUBLE_EQ(p.smoothedLoss(), 4.0); // bias-corrected from the start
  Progress q(out, Progress::Config{});
  for (int i = 0; i < 200; ++i)
    q.update(i, i < 100 ? 10.0 : 2.0, 0.01, i + 1.0);
  EXPECT_NEAR(q.smoothedLoss(), 2.0, 1e-3);
  q.update(200, std::nan(""), 0.01, 202.0);
  EXPECT_NEAR(q.smoothedLoss(), 2.0, 1e-3);
}
