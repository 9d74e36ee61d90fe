"""The personalized-GUI environment: SmartSpot-like episodes, replayed or played live.

``PersonaEnv(dataset=None | folder, preset="tiny", seed=0, channel=None, split="train",
mode="replay" | "online", max_steps=50, history_window=None)``. Without a folder the preset is
generated in memory (:func:`~odyssey_core.envs.persona.dataset.generate_episodes` with
``seed``). The turn text lists every action so far, or the last ``history_window`` of them
(the paper's prompt shows all; a short window keeps prompts small for a CPU model).

* ``replay`` (the paper's offline protocol, teacher-forced): every observation is the next
  recorded step, whatever the agent answered; the history in the turn text holds the
  demonstration's actions; the episode terminates after its last step.
* ``online``: the agent's actions drive the app (:class:`PersonaApp`) from its first screen.
  When it answers ``pool_found`` the env takes the list on screen as the pool and shows each
  candidate's detail card in turn for a Yes / No; the episode terminates after the last
  candidate (or at once when no list is on screen) and is truncated at ``max_steps``. The end
  info carries ``recommended`` (the agent's Yes set), ``yes_set`` (the user's) and
  ``success`` (the two are equal). Anything but ``recommendation Yes`` on a card counts as No.

The env's own reward is 0.0: the recipe's reward wrapper scores each step from ``info``.
``step`` takes model text (read with :func:`parse_gui_answer`), a :class:`ParsedGuiAnswer`, a
:class:`GuiAction`, or one of :attr:`legal_actions` (by name or index: the point-free search
actions, for random and classical agents).

``info`` describes the step the agent faces next: ``stage`` (None once over), ``step_index``,
``episode_id``, ``channel``, ``screen_size``, ``intent``, ``intent_slots``, ``fallback_count``
(the episode's answers so far with nothing readable in them). After a step it also
describes the step just answered: ``answered_stage``, ``gold`` (the demonstrated action; online,
the demonstrator's choice in the state the agent faced), ``target_box``, ``optimal``,
``candidate``, ``label`` (Yes / No on recommend steps), ``parsed`` (the action read, as JSON, or
None), ``format_valid``, ``parse_error``, ``invalid_action`` (nothing readable) and
``goal_reached`` (online success). Online, ``stage`` comes from the demonstrator: ``pool`` once
the list shows the user's pool.

The fallback for an answer with nothing readable in it (no dictionary, an unknown action, a
point that is not two finite numbers such as ``[1e999, 5]``): nothing is done; online the app
stays where it was and the history line says ``(unreadable answer)``, in replay the next
recorded step comes as always. The step is flagged ``invalid_action`` and counted in
``fallback_count``; model text never makes ``step`` raise.
"""

from __future__ import annotations

import functools
import string
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.envs.persona.app import AppState, PersonaApp
from odyssey_core.envs.persona.catalog import CHANNELS
from odyssey_core.envs.persona.dataset import generate_episodes, load_step_image, read_dataset
from odyssey_core.envs.persona.demonstrator import expected_stage, optimal_moves, realise
from odyssey_core.envs.persona.episode import SPLITS, EpisodeRecord
from odyssey_core.envs.persona.render import FastRenderer, Renderer
from odyssey_core.protocol.gui import GuiAction, ParsedGuiAnswer, parse_gui_answer

__all__ = ["LEGAL_ACTIONS", "MODES", "PersonaEnv", "turn_text"]

MODES: tuple[str, ...] = ("replay", "online")
LEGAL_ACTIONS: tuple[str, ...] = ("scroll up", "scroll down", "scroll left", "scroll right", "exit")
MAX_TEXT = 4000  # the turn text stays inside Gymnasium's default Text space (4096)
_PRINTABLE = frozenset(string.printable)


@functools.lru_cache(maxsize=4)
def _generated(preset: str, seed: int) -> tuple[EpisodeRecord, ...]:
    return tuple(generate_episodes(preset, seed))


def _printable(text: str) -> str:
    return "".join(c if c in _PRINTABLE else "?" for c in text)


def turn_text(
    request: str, history: list[str], width: int, height: int, window: int | None = None
) -> str:
    """The text of one turn: the request, the screen size and the actions so far (the last
    ``window`` of them when set)."""
    head = [
        "You are working a phone app for a user.",
        f'The user said: "{request}"',
        f"The screenshot is {width} x {height} pixels; points [x, y] count from its top-left.",
    ]
    lines = [f"{k}. {line[:160]}" for k, line in enumerate(history, start=1)]
    if window is not None:
        lines = lines[len(lines) - window :] if window else []
    while True:  # drop the oldest actions until the text fits
        omitted = len(history) - len(lines)
        body = ["Actions so far: none."] if not history else ["Actions so far, oldest first:"]
        if omitted:
            body.append(f"({omitted} earlier actions not shown)")
        text = _printable("\n".join([*head, *body, *lines]))
        if len(text) <= MAX_TEXT or not lines:
            return text
        lines = lines[1:]


class PersonaEnv(TurnEnv):
    """SmartSpot-like personalized GUI episodes (see the module docstring)."""

    def __init__(
        self,
        *,
        dataset: str | Path | None = None,
        preset: str = "tiny",
        seed: int = 0,
        channel: str | None = None,
        split: str = "train",
        mode: str = "replay",
        max_steps: int = 50,
        renderer: Renderer | None = None,
        history_window: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if channel is not None and channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}; channels: {CHANNELS}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if history_window is not None and history_window < 0:
            raise ValueError(f"history_window must be >= 0 or None, got {history_window}")
        self.history_window = history_window
        self.dataset = Path(dataset) if dataset is not None else None
        self.mode, self.split, self.channel, self.max_steps = mode, split, channel, max_steps
        self.renderer = renderer or FastRenderer()
        found = read_dataset(self.dataset, split) if self.dataset else _generated(preset, seed)
        episodes = [e for e in found if e.split == split and channel in (None, e.channel)]
        if mode == "online":
            episodes = [e for e in episodes if e.scenario]  # loaded real data cannot be played
        where = f"{self.dataset or f'preset {preset!r} (seed {seed})'}"
        if not episodes:
            what = f"{channel} " if channel else ""
            raise ValueError(f"{where} has no {what}{split} episodes to {mode}")
        sizes = {(e.width, e.height) for e in episodes}
        if len(sizes) != 1:
            raise ValueError(f"{where}: episodes of one env need one screen size, got {sizes}")
        self.episodes: list[EpisodeRecord] = episodes
        self.width, self.height = sizes.pop()
        self.env_id = f"persona-{channel}" if channel else "persona"
        self.legal_actions = list(LEGAL_ACTIONS)
        self.action_space = gymnasium.spaces.Discrete(len(self.legal_actions))
        self.observation_space = gymnasium.spaces.Box(
            0, 255, (self.height, self.width, 3), np.uint8
        )
        self._by_id = {e.episode_id: e for e in episodes}
        self._images: dict[int, np.ndarray] = {}
        self.episode: EpisodeRecord = episodes[0]
        self.step_index = 0  # replay: the step on screen; online: the turns taken
        self.app: PersonaApp | None = None
        self.state: AppState | None = None
        self.candidates: list[str] | None = None  # online, once the pool is declared
        self.recommended: list[str] = []
        self._card = 0
        self._history: list[str] = []
        self._fallbacks = 0  # answers this episode with nothing readable in them
        self._image = np.zeros((self.height, self.width, 3), np.uint8)
        self._done = True

    # -- what the expert reads ------------------------------------------------------------------
    @property
    def candidate(self) -> str | None:
        """Online: the candidate whose card is on screen (None outside the recommend stage)."""
        if self.candidates is None or self._card >= len(self.candidates):
            return None
        return self.candidates[self._card]

    # -- the contract ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "episode" in options:
            if options["episode"] not in self._by_id:
                raise KeyError(
                    f"no episode {options['episode']!r} among the {len(self.episodes)} "
                    f"{self.split} episodes of this env"
                )
            self.episode = self._by_id[options["episode"]]
        else:
            self.episode = self.episodes[int(self.np_random.integers(len(self.episodes)))]
        self.step_index, self._card, self._done, self._fallbacks = 0, 0, False, 0
        self._images.clear()  # replay screenshots of the current episode only
        self._history, self.recommended, self.candidates = [], [], None
        if self.mode == "online":
            self.app = PersonaApp(self.episode.scenario, self.width, self.height)
            self.state = self.app.initial_state()
        return self._observation(), self._info()

    def step(self, action: Any) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        played, format_valid, parse_error = self._resolve(action)
        self._fallbacks += played is None
        answered = self._answered_info()
        if self.mode == "replay":
            step = self.episode.steps[self.step_index]
            self._history.append(step.gold.describe())
            self.step_index += 1
            terminated = self.step_index >= len(self.episode.steps)
            truncated = False
        else:
            terminated = self._play(played)
            self.step_index += 1
            truncated = not terminated and self.step_index >= self.max_steps
        self._done = terminated or truncated
        info = self._info()
        info.update(answered)
        info.update(
            parsed=played.to_json() if played is not None else None,
            format_valid=format_valid,
            parse_error=parse_error,
            invalid_action=played is None,
            goal_reached=False,
        )
        if self.mode == "online" and self._done:
            yes_set = sorted(self.episode.yes_items)
            success = terminated and sorted(self.recommended) == yes_set
            info.update(recommended=sorted(self.recommended), yes_set=yes_set, success=success)
            info["goal_reached"] = success
        return self._observation(), 0.0, terminated, truncated, info

    def render(self) -> np.ndarray:  # type: ignore[override]
        return self._image.copy()

    # -- online play ----------------------------------------------------------------------------
    def _play(self, action: GuiAction | None) -> bool:
        """Apply the agent's action to the live app; True when the episode is over."""
        assert self.app is not None and self.state is not None
        if self.candidates is not None:  # a card is on screen: any answer moves on
            if action is not None and action.action == "recommendation" and action.text == "Yes":
                self.recommended.append(self.candidates[self._card])
            self._history.append(action.describe() if action else "(unreadable answer)")
            self._card += 1
            return self._card >= len(self.candidates)
        self._history.append(action.describe() if action else "(unreadable answer)")
        if action is None or action.action == "recommendation":
            return False
        if action.action == "pool_found":
            self.candidates = self.app.pool(self.state)
            return not self.candidates
        self.state = self.app.apply(self.state, action)
        return False

    # -- helpers --------------------------------------------------------------------------------
    def _resolve(self, action: Any) -> tuple[GuiAction | None, bool, str | None]:
        if isinstance(action, GuiAction):
            return action, True, None
        if isinstance(action, ParsedGuiAnswer):
            return action.action, action.valid, action.error
        if isinstance(action, int | np.integer) and not isinstance(action, bool):
            if not 0 <= int(action) < len(self.legal_actions):
                raise ValueError(
                    f"action index {action} out of range (0..{len(self.legal_actions) - 1})"
                )
            return GuiAction(self.legal_actions[int(action)]), True, None
        if isinstance(action, str):
            if action in self.legal_actions:
                return GuiAction(action), True, None
            parsed = parse_gui_answer(action)
            return parsed.action, parsed.valid, parsed.error
        raise TypeError(
            f"unsupported action {action!r}: give model text, a ParsedGuiAnswer, a GuiAction "
            "or one of env.legal_actions (by name or index)"
        )

    def _next_stage(self) -> str | None:
        if self._done:
            return None
        if self.mode == "replay":
            return self.episode.steps[self.step_index].stage
        if self.candidates is not None:
            return "recommend"
        assert self.app is not None and self.state is not None
        return expected_stage(self.app, self.state)

    def _info(self) -> dict[str, Any]:
        return {
            "stage": self._next_stage(),
            "step_index": self.step_index,
            "episode_id": self.episode.episode_id,
            "channel": self.episode.channel,
            "screen_size": [self.width, self.height],
            "intent": self.episode.intent,
            "intent_slots": dict(self.episode.intent_slots),
            "fallback_count": self._fallbacks,
        }

    def _answered_info(self) -> dict[str, Any]:
        """What the step about to be answered asks for (before the action changes anything)."""
        if self.mode == "replay":
            step = self.episode.steps[self.step_index]
            box = step.target_box
            return {
                "answered_stage": step.stage,
                "gold": step.gold.to_json(),
                "target_box": list(box) if box is not None else None,
                "optimal": [list(o) for o in step.optimal],
                "candidate": step.candidate,
                "label": step.gold.text if step.stage == "recommend" else None,
            }
        app, state = self.app, self.state
        assert app is not None and state is not None
        if self.candidates is not None:
            candidate = self.candidates[self._card]
            label = app.user.label(app.item(candidate), app.items(app.user.pool_app))
            gold = GuiAction("recommendation", input_text=label)
            return {
                "answered_stage": "recommend",
                "gold": gold.to_json(),
                "target_box": None,
                "optimal": [["recommendation", None]],
                "candidate": candidate,
                "label": label,
            }
        moves = optimal_moves(app, state)
        screen = app.screen(state)
        target = moves[0].target
        return {
            "answered_stage": "pool" if moves[0].action == "pool_found" else "search",
            "gold": realise(moves[0], screen).to_json(),
            "target_box": list(screen.element(target).box) if target else None,
            "optimal": [list(m.key) for m in moves],
            "candidate": None,
            "label": None,
        }

    def _frame(self) -> np.ndarray:
        episode = self.episode
        if self.mode == "online":
            assert self.app is not None and self.state is not None
            state = self.state
            if self.candidate is not None:
                state = self.app.detail_state(state, self.candidate)
            return self.renderer.render(self.app.screen(state))
        index = min(self.step_index, len(episode.steps) - 1)  # the last screen stays at the end
        if index not in self._images:
            step = episode.steps[index]
            if self.dataset is not None:
                self._images[index] = load_step_image(self.dataset, step)
            else:
                self._images[index] = self.renderer.render(step.screen)
        return self._images[index]

    def _observation(self) -> Observation:
        self._image = self._frame()
        text = turn_text(
            self.episode.request, self._history, self.width, self.height, self.history_window
        )
        meta = {"episode_id": self.episode.episode_id, "mode": self.mode}
        return Observation(image=self._image.copy(), text=text, meta=meta)
