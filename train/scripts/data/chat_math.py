"""Math word problems for make_chat_kinds.py: templates with seeded numbers, each with its answer computed (the
assistant turn of a multi-turn prompt's earlier exchange). A problem's split key is its filled text.

    draft = math_problem(random.Random(0), pools)   # Draft("A train travels 180 km in 2 hours. ...", "math:speed", ...)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

from chat_templates import NAMES, Draft, Pools

ITEMS = ("notebook", "apple", "ticket", "pencil", "cupcake", "book", "shirt", "plant", "game", "mug")
Problem = tuple[str, str]  # (question, answer)


def money(x: float) -> str:
    return f"${x:,.2f}".replace(".00", "")


def change(r: random.Random) -> Problem:
    name, item, n, price = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 9), r.choice((1.25, 2.5, 3.75, 4, 6.5, 12))
    bill = next(b for b in (5, 10, 20, 50, 100, 200) if b > n * price)
    return (f"{name} buys {n} {item}s at {money(price)} each and pays with a {money(bill)} bill. How much change does "
            f"{name} get?", money(bill - n * price))  # fmt: skip


def speed(r: random.Random) -> Problem:
    v, h, d2 = r.choice((40, 60, 75, 80, 90, 120)), r.randint(2, 6), r.choice((100, 150, 240, 300, 450))
    return (f"A train travels {v * h} km in {h} hours. At the same speed, how long does it take to travel {d2} km?",
            f"{Fraction(d2, v)} hours")  # fmt: skip


def discount(r: random.Random) -> Problem:
    price, off = r.choice((40, 60, 85, 120, 250, 80)), r.choice((10, 15, 20, 25, 30, 40))
    return (f"A jacket costs {money(price)}. It is on sale for {off}% off. What is the sale price?",
            money(price * (100 - off) / 100))  # fmt: skip


def ages(r: random.Random) -> Problem:
    a, b = r.sample(NAMES[:26], 2)
    younger, gap, years = r.randint(5, 30), r.randint(2, 12), r.randint(2, 10)
    total = 2 * younger + gap + 2 * years
    return (f"{a} is {gap} years older than {b}. In {years} years, the sum of their ages will be {total}. How old is "
            f"{b} now?", f"{younger}")  # fmt: skip


def work_rate(r: random.Random) -> Problem:
    a, b = r.sample(NAMES[:26], 2)
    x, y = r.sample((2, 3, 4, 5, 6, 8, 10, 12), 2)
    return (f"{a} can paint a fence in {x} hours and {b} can paint it in {y} hours. How long does it take them "
            f"working together?", f"{Fraction(x * y, x + y)} hours")  # fmt: skip


def garden(r: random.Random) -> Problem:
    w, length = r.randint(3, 20), r.randint(5, 40)
    return (f"A rectangular garden is {w} m wide and {length} m long. How much fencing goes around it, and what is "
            f"its area?", f"{2 * (w + length)} m of fencing, {w * length} square meters")  # fmt: skip


def interest(r: random.Random) -> Problem:
    p, rate, years = r.choice((500, 1000, 2500, 4000, 10000)), r.choice((2, 3, 4, 5, 6)), r.randint(2, 5)
    return (f"If you invest {money(p)} at {rate}% interest compounded yearly, how much will you have after {years} "
            f"years?", money(round(p * (1 + rate / 100) ** years, 2)))  # fmt: skip


def recipe(r: random.Random) -> Problem:
    n, m, cups = r.choice((2, 4, 6)), r.choice((3, 5, 9, 10, 12)), r.choice((1, 2, 3))
    return (f"A recipe for {n} people needs {cups} cups of flour. How much flour do I need for {m} people?",
            f"{Fraction(cups * m, n)} cups")  # fmt: skip


def average(r: random.Random) -> Problem:
    name, scores, goal = r.choice(NAMES), [r.randint(60, 95) for _ in range(4)], r.choice((80, 85, 90))
    return (f"{name}'s test scores are {', '.join(map(str, scores))}. What score is needed on the fifth test to "
            f"average {goal}?", f"{5 * goal - sum(scores)}")  # fmt: skip


def book(r: random.Random) -> Problem:
    name, a, b, pages = r.choice(NAMES), r.choice((3, 4, 5)), r.choice((2, 3, 4)), r.choice((120, 240, 360, 480))
    left = Fraction(pages) * (1 - Fraction(1, a)) * (1 - Fraction(1, b))
    return (f"{name} read 1/{a} of a {pages}-page book on Monday and 1/{b} of the rest on Tuesday. How many pages are "
            f"left?", f"{left}")  # fmt: skip


def consecutive(r: random.Random) -> Problem:
    n, k = r.randint(5, 200), r.choice((3, 4, 5))
    total = sum(range(n, n + k))
    return f"The sum of {k} consecutive integers is {total}. What are they?", ", ".join(map(str, range(n, n + k)))


def marbles(r: random.Random) -> Problem:
    red, blue, green = r.randint(2, 12), r.randint(2, 12), r.randint(2, 12)
    return (f"A bag has {red} red, {blue} blue and {green} green marbles. If you pick one at random, what is the "
            f"probability that it is not blue?", f"{Fraction(red + green, red + blue + green)}")  # fmt: skip


def movie(r: random.Random) -> Problem:
    h, m, d = r.randint(1, 10), r.choice((0, 15, 30, 45, 50)), r.randint(85, 175)
    end = h * 60 + m + d
    return (f"A movie starts at {h}:{m:02d} pm and lasts {d} minutes. When does it end?",
            f"{(end // 60 - 1) % 12 + 1}:{end % 60:02d} pm")  # fmt: skip


def wages(r: random.Random) -> Problem:
    name, rate, hours = r.choice(NAMES), r.choice((12, 15, 18, 22.5, 30)), r.randint(35, 55)
    pay = rate * min(hours, 40) + 1.5 * rate * max(0, hours - 40)
    return (f"{name} earns {money(rate)} an hour and works {hours} hours this week, with time-and-a-half for hours "
            f"over 40. What is {name}'s pay for the week?", money(pay))  # fmt: skip


def tiles(r: random.Random) -> Problem:
    side, a, b = r.choice((20, 25, 50)), r.randint(2, 8), r.randint(2, 8)
    return (f"How many {side} cm square tiles are needed to cover a floor of {a} m by {b} m?",
            f"{(a * 100 // side) * (b * 100 // side)}")  # fmt: skip


def growth(r: random.Random) -> Problem:
    a = r.choice((2000, 4500, 12000, 25000, 80000))
    pct = r.choice((4, 5, 8, 10, 12, 20, 25))
    return (f"A town's population grew from {a:,} to {a * (100 + pct) // 100:,}. By what percent did it grow?",
            f"{pct}%")  # fmt: skip


def meeting(r: random.Random) -> Problem:
    v1, v2, hours = r.choice((50, 60, 70, 80)), r.choice((40, 55, 65, 90)), r.choice((2, 3, 4))
    return (f"Two cars leave towns {(v1 + v2) * hours} km apart at the same time, driving toward each other at {v1} "
            f"km/h and {v2} km/h. After how long do they meet?", f"{hours} hours")  # fmt: skip


def savings(r: random.Random) -> Problem:
    name, weekly, price = r.choice(NAMES), r.choice((15, 20, 25, 40)), r.choice((180, 250, 399, 620))
    return (f"{name} saves {money(weekly)} a week. How many weeks until {name} can buy a bike that costs "
            f"{money(price)}?", f"{-(-price // weekly)} weeks")  # fmt: skip


def ratio(r: random.Random) -> Problem:
    a, b, k = r.randint(1, 5), r.randint(1, 5), r.randint(3, 8)
    return (f"The ratio of boys to girls in a class is {a}:{b}. If there are {(a + b) * k} students, how many are "
            f"girls?", f"{b * k}")  # fmt: skip


def fuel(r: random.Random) -> Problem:
    per100, d, price = r.choice((5, 6, 7.5, 8)), r.choice((150, 320, 480, 750)), r.choice((1.6, 1.8, 1.95))
    liters = per100 * d / 100
    return (f"A car uses {per100} liters of fuel per 100 km. How much fuel does a {d} km trip take, and what does it "
            f"cost at {money(price)} per liter?", f"{liters:g} liters, {money(round(liters * price, 2))}")  # fmt: skip


def cylinder(r: random.Random) -> Problem:
    radius, height = r.randint(2, 15), r.randint(5, 40)
    return (f"What is the volume of a cylinder with radius {radius} cm and height {height} cm?",
            f"{radius * radius * height}π ≈ {3.14159265 * radius * radius * height:,.1f} cubic cm")  # fmt: skip


PROBLEMS: dict[str, Callable[[random.Random], Problem]] = {
    f.__name__: f
    for f in (change, speed, discount, ages, work_rate, garden, interest, recipe, average, book, consecutive, marbles,
              movie, wages, tiles, growth, meeting, savings, ratio, fuel, cylinder)
}  # fmt: skip


def math_problem(rng: random.Random, pools: Pools) -> Draft:
    name = rng.choice(sorted(PROBLEMS))
    question, answer = PROBLEMS[name](rng)
    template = rng.choice(("{q}", "{q} Show your work.", "Solve: {q}", "Can you help me with this word problem? {q}",
                           "{q} Explain step by step.", "math homework: {q}",
                           "{q} Please explain how you got it."))  # fmt: skip
    reply = f"Let's work it out step by step. ... So the answer is {answer}."
    return Draft(template.format(q=question), f"math:{name}", question, reply)
