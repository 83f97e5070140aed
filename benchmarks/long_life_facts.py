"""The synthetic facts of ``benchmarks/long_life.py``: seeded, English and Chinese.

Most facts are traits of a growing cast of people — where they live and work, birthdays,
dogs, allergies — so the same names come back again and again, as in a real user's
MEMORY.md; the rest are projects and decisions. Nothing is copied from a dataset.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from itertools import product


def words(text: str) -> list[str]:
    return text.split()


FIRST = words(
    "Ines Omar Priya Tomas Mei Lukas Amara Jonas Sofia Ravi Elena Kofi Hana Mateo Nadia "
    "Yusuf Clara Diego Aiko Felix Zara Bruno Leila Anton Maya Pavel Rosa Emeka Vera Hugo"
)
LAST = words(
    "Moreau Haddad Nair Kowalski Tanaka Berg Okafor Lindqvist Rossi Mehta Petrova Mensah "
    "Sato Alvarez Farouk Demir Novak Castillo Ito Brandt Kaya Silva Romero Weber Costa "
    "Volkov Ferreira Adeyemi Horvat Dubois"
)
CITIES = words("Lisbon Osaka Lagos Quito Riga Tunis Utrecht Vienna Warsaw Xiamen York Zagreb")
PROJECTS = words("Falcon Heron Kestrel Osprey Puffin Raven Swift Tern Ibis Egret Plover Wren")
PARTS = words("billing search onboarding reporting export login payments alerts")
TECH = words("PostgreSQL Redis Kafka SQLite DuckDB RabbitMQ Elasticsearch ClickHouse")
DISHES = words("ramen paella moussaka pho lasagne biryani ceviche goulash tagine bibimbap")
COMPANIES = words(
    "Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Cyberdyne Soylent Wonka Tyrell"
)
DOGS = words("Biscuit Pepper Mochi Luna Rex Olive Bruno Toffee Nala Pixel Ziggy Juniper")
ALLERGENS = words("peanuts shellfish gluten pollen penicillin sesame latex cats")
MONTH_DAYS = [f"{m} {d}" for m in words("March June September December") for d in (3, 11, 19, 27)]
ZH_SURNAMES = list("王李张刘陈杨赵黄周吴徐孙胡朱高林何郭马罗")
ZH_GIVEN = words("伟 芳 娜 敏 静 丽 强 磊 军 洋 勇 艳 杰 娟 涛 明 超 秀英 霞 平 刚 桂英 晓东")
ZH_DAYS = [f"{m}月{d}日" for m in (2, 5, 8, 11) for d in (4, 12, 20, 28)]
ZH_COMPANIES = words("华为 腾讯 阿里巴巴 百度 小米 京东 美团 字节跳动")
ZH_DISHES = words("饺子 火锅 小笼包 麻婆豆腐 烤鸭 红烧肉 担担面 煎饼")
ZH_CITIES = words("北京 上海 广州 深圳 杭州 成都 西安 南京 武汉 重庆 苏州 厦门 青岛 昆明 长沙 大连")
SMALL_TALK = [
    ("Any idea for a quick dinner tonight?", "A stir-fry with whatever vegetables you have."),
    ("I slept badly again.", "Sorry to hear that; maybe skip coffee after noon."),
    ("Remind me what a good stretch for the back is.", "Try a slow cat-cow, ten times."),
    ("The weather is awful today.", "A good day for indoor work, then."),
    ("我今天有点累。", "那就早点休息吧。"),
    ("Can you suggest a podcast for the commute?", "A short history podcast could fit."),
]


@dataclass(frozen=True)
class Fact:
    key: str  # whom or what it is about
    value: str
    text: str  # as recorded; a hit holds the fact when it holds this text
    query: str
    section: str
    movable: bool = False  # where someone lives: later sessions may correct it


# A trait of a person: (entry, question, values). Every person gets each trait once, in a
# shuffled order, so a long-lived user's file names the same people again and again.
Trait = tuple[str, str, list[str]]
EN_TRAITS: list[Trait] = [
    ("{who} lives in {v}.", "Where does {who} live?", CITIES),
    ("{who}'s birthday is on {v}.", "When is {who}'s birthday?", MONTH_DAYS),
    ("{who}'s favourite dish is {v}.", "What is {who}'s favourite dish?", DISHES),
    ("{who} works at {v} now.", "Where does {who} work?", COMPANIES),
    ("{who} has a dog called {v}.", "What is the name of {who}'s dog?", DOGS),
    ("{who} is allergic to {v}.", "What is {who} allergic to?", ALLERGENS),
]
ZH_TRAITS: list[Trait] = [
    ("{who}的生日是{v}。", "{who}的生日是哪天？", ZH_DAYS),
    ("{who}住在{v}。", "{who}住在哪个城市？", ZH_CITIES),
    ("{who}在{v}工作。", "{who}在哪家公司工作？", ZH_COMPANIES),
    ("{who}最喜欢吃{v}。", "{who}最喜欢吃什么？", ZH_DISHES),
]
# Which kind each fact is, in turn: English people, Chinese people, projects, decisions.
KINDS = "EEZEPEZEDE"
CAST = {"E": 10, "Z": 5}  # people met at a time, once the last ones' traits are all known


class Facts:
    """The seeded fact generator. The sequence does not depend on the run's length, so a
    shorter run records a prefix of a longer one's facts."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.people = {
            "E": self._shuffled([f"{a} {b}" for a, b in product(FIRST, LAST)]),
            "Z": self._shuffled([s + g for s, g in product(ZH_SURNAMES, ZH_GIVEN)]),
        }
        self.traits = {"E": EN_TRAITS, "Z": ZH_TRAITS}
        self.pending: dict[str, list[tuple[str, Trait]]] = {"E": [], "Z": []}
        self.things = self._shuffled([f"{p}-{n}" for p, n in product(PROJECTS, range(1, 40))])
        self.parts = self._shuffled([f"{p} {q}" for p, q in product(PROJECTS, PARTS)])
        self.count = 0
        # Every city someone was recorded living in: a move never goes back to one, whose
        # old entry a lazy correction left in the file.
        self.lived: dict[str, set[str]] = {}

    def _shuffled(self, items: list[str]) -> list[str]:
        self.rng.shuffle(items)
        return items

    def new(self) -> Fact:
        kind, self.count = KINDS[self.count % len(KINDS)], self.count + 1
        if kind in self.pending:
            return self._trait(kind)
        pick = self.rng.choice
        if kind == "P":
            code, sprint = self.things.pop(), f"sprint {self.rng.randint(1, 30)}"
            text = f"Project {code} ships in {sprint}; {pick(FIRST)} owns the release."
            return Fact(code, sprint, text, f"When does project {code} ship?", "Ongoing")
        part, tech = self.parts.pop(), pick(TECH)
        text = f"Decided to use {tech} for the {part} service, after a long debate."
        query = f"Which technology did we choose for the {part} service?"
        return Fact(part, tech, text, query, "Decisions")

    def _trait(self, kind: str) -> Fact:
        pending = self.pending[kind]
        if not pending:
            cast = [self.people[kind].pop() for _ in range(CAST[kind])]
            pending.extend(product(cast, self.traits[kind]))
            self.rng.shuffle(pending)
        who, (entry, question, values) = pending.pop()
        value = self.rng.choice(values)
        # Some entries go to the default section: agents do not always name one.
        section = ("People" if kind == "E" else "人物") if self.rng.random() < 0.8 else "Notes"
        text = entry.format(who=who, v=value)
        movable = values is CITIES
        if movable:
            self.lived[who] = {value}
        return Fact(who, value, text, question.format(who=who), section, movable)

    def moved(self, old: Fact, *, careful: bool) -> Fact:
        """``old`` (someone's city) corrected: the new entry a careful or a lazy agent writes."""
        city = self.rng.choice([c for c in CITIES if c not in self.lived[old.key]])
        self.lived[old.key].add(city)
        if careful:
            return replace(old, value=city, text=f"{old.key} lives in {city}.")
        text = f"Correction: {old.key} moved, and now lives in {city} (not {old.value})."
        return replace(old, value=city, text=text)
