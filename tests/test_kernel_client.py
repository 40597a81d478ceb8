"""perflab run's kernel client: a wait for a cell's reply with no end is a loop of short waits
(nbclient's endless wait can miss a reply that arrived while a widget's state was sent)."""

import asyncio
from queue import Empty

import pytest
from jupyter_client.channels import AsyncZMQSocketChannel

from perflab.tools.kernel_client import (
    LOOK_S,
    LookingKernelClient,
    LookingKernelManager,
    LookingShellChannel,
)


def _channel(monkeypatch, replies):
    """A shell channel whose socket answers each look from ``replies`` (None: nothing yet)."""
    looks = []

    async def get_msg(self, timeout=None):
        looks.append(timeout)
        reply = replies.pop(0)
        if reply is None:
            raise Empty
        return reply

    monkeypatch.setattr(AsyncZMQSocketChannel, "get_msg", get_msg)
    return LookingShellChannel.__new__(LookingShellChannel), looks


def test_an_endless_wait_looks_again_until_the_reply_is_there(monkeypatch):
    channel, looks = _channel(monkeypatch, [None, None, {"msg_id": "reply"}])
    assert asyncio.run(channel.get_msg()) == {"msg_id": "reply"}
    assert looks == [LOOK_S] * 3  # never one wait without a timeout


def test_a_wait_with_a_timeout_is_left_as_asked(monkeypatch):
    channel, looks = _channel(monkeypatch, [None])
    with pytest.raises(Empty):
        asyncio.run(channel.get_msg(timeout=5))
    assert looks == [5]


def test_the_manager_hands_out_the_looking_client_with_the_looking_shell_channel():
    manager = LookingKernelManager()
    assert manager.client_factory is LookingKernelClient
    assert LookingKernelClient().shell_channel_class is LookingShellChannel
