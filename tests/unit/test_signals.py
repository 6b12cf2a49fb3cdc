"""close_on_signals, in a real process: the only place a signal and an exit status can be observed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from plitzi_jobs_mysql.assembly.signals import close_on_signals

    def say(text):
        print(text, flush=True)
    """
)


def run(body: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    script = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def test_the_first_signal_stops_then_runs_after_close_then_exits_zero() -> None:
    result = run(
        """
        class Jobs:
            async def stop(self):
                await asyncio.sleep(0.05)
                say("stopped")

        async def after_close():
            await asyncio.sleep(0)
            say("after_close")

        async def main():
            close_on_signals(Jobs(), after_close=after_close)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
            say("still running")

        asyncio.run(main())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped", "after_close"]


def test_close_is_used_when_there_is_no_stop_and_after_close_may_be_sync() -> None:
    result = run(
        """
        class Server:
            async def close(self):
                say("closed")

        async def main():
            close_on_signals(Server(), after_close=lambda: say("after_close"))
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(30)

        asyncio.run(main())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["closed", "after_close"]


def test_a_close_that_raises_exits_one_and_is_logged() -> None:
    result = run(
        """
        import logging
        logging.basicConfig(level=logging.INFO)

        class Jobs:
            async def stop(self):
                raise RuntimeError("could not drain")

        async def main():
            close_on_signals(Jobs(), after_close=lambda: say("after_close"))
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)

        asyncio.run(main())
        """
    )
    assert result.returncode == 1
    assert "after_close" not in result.stdout
    assert "could not drain" in result.stderr


def test_a_second_signal_exits_at_once_with_status_one() -> None:
    script = PRELUDE + textwrap.dedent(
        """
        class Jobs:
            async def stop(self):
                say("stopping")
                await asyncio.Event().wait()  # a drain that would never end

        async def main():
            close_on_signals(Jobs(), after_close=lambda: say("after_close"))
            say("ready")
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGTERM)
        assert process.stdout.readline().strip() == "stopping"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 1
        assert "after_close" not in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_answer_removes_the_handlers() -> None:
    result = run(
        """
        class Jobs:
            async def stop(self):
                say("stopped")

        async def main():
            remove = close_on_signals(Jobs(), signals=[signal.SIGTERM])
            remove()
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)

        asyncio.run(main())
        """
    )
    assert result.returncode == -signal.SIGTERM
    assert "stopped" not in result.stdout


def test_something_that_cannot_close_is_refused() -> None:
    import pytest

    from plitzi_jobs_mysql.assembly.signals import close_on_signals

    with pytest.raises(TypeError):
        close_on_signals(object())
