import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session")
def generated(tmp_path_factory):
    """1000 speculative-teacher dialogues (seed 0) and 300 sync-teacher ones, generated once per session."""
    from data_gen.config import GeneratorConfig
    from data_gen.dialogues import select_domains
    from data_gen.generate import generate_dialogue

    config = GeneratorConfig()
    domains = select_domains(config)
    speculative = [generate_dialogue(i, 0, config, domains) for i in range(1000)]
    sync_config = GeneratorConfig(teacher="sync")
    sync = [generate_dialogue(i, 0, sync_config, domains) for i in range(300)]
    return speculative, sync


@pytest.fixture
def hub(monkeypatch):
    """A running mock Hub with huggingface_hub pointed at it (tests/test_hub.py says how) and near-zero backoff."""
    from huggingface_hub import constants

    import clocktune.hub as hub_module
    from tests.mock_hub import MockHub

    with MockHub() as mock:
        monkeypatch.setattr(constants, "ENDPOINT", mock.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_TOKEN", "hf_test")
        monkeypatch.setattr(hub_module, "RETRY_BASE_DELAY_S", 0.01)
        yield mock
