"""``perf.threads.fastest_threads``: the thread count is chosen by timing the step."""

import time

from minidl.parallel import get_num_threads, num_threads
from minidl.perf.threads import fastest_threads


def sleeper(seconds_by_threads, calls):
    def step():
        calls.append(get_num_threads())
        time.sleep(seconds_by_threads[get_num_threads()])

    return step


def test_the_fastest_count_is_chosen_whichever_it_is():
    for times, best in (({1: 0.002, 2: 0.010}, 1), ({1: 0.010, 2: 0.002}, 2)):
        calls = []
        chosen, medians = fastest_threads(sleeper(times, calls), (1, 2))
        assert chosen == best and set(medians) == {1, 2}, (chosen, medians)
        assert calls.count(1) == 3 and calls.count(2) == 5  # warm-up and first step on 2


def test_a_step_longer_than_the_budget_keeps_the_most_threads_without_more_timing():
    calls = []
    chosen, medians = fastest_threads(sleeper({1: 0.001, 2: 0.05}, calls), (1, 2), budget_s=0.02)
    assert chosen == 2 and list(medians) == [2] and calls == [2, 2]


def test_the_thread_count_before_the_timing_is_kept():
    with num_threads(3):
        fastest_threads(sleeper({1: 0.001, 2: 0.001}, []), (1, 2))
        assert get_num_threads() == 3
