"""The training commands refuse a bad count at the command line, naming it and what is allowed."""
import pytest

from engine.train import drafter, target, tokenizer


@pytest.mark.parametrize("main, argv, message", [
    (drafter.main, ["--depth", "0"], "argument --depth: 0 is out of range; allowed: 1 or more"),
    (drafter.main, ["--sampled", "-1"], "argument --sampled: -1 is out of range; allowed: 0 or more"),
    (target.main, ["--batch", "two"], "argument --batch: 'two' is not a whole number"),
    (tokenizer.main, ["--steps", "0"], "argument --steps: 0 is out of range; allowed: 1 or more"),
])
def test_a_bad_count_is_refused_before_any_work(main, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2  # argparse's usage error
    assert message in capsys.readouterr().err


def test_a_good_count_is_read_as_a_number():
    args = drafter.build_parser().parse_args(["--depth", "3", "--sampled", "0"])
    assert (args.depth, args.sampled) == (3, 0)
