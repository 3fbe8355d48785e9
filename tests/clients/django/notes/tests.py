"""What the app does on its database: relations, decimals, case-insensitive lookups, and a
failed atomic block rolled back to its savepoint."""

from decimal import Decimal
from django.contrib.auth.models import User
from django.db import transaction, IntegrityError
from django.test import TestCase
from .models import Note, Tag

class NoteTests(TestCase):
    def test_create_query_and_relations(self):
        u = User.objects.create_user("bob", password="pw")
        t = Tag.objects.create(name="x")
        n = Note.objects.create(title="hello", price=Decimal("12.50"), author=u)
        n.tags.add(t)
        self.assertEqual(Note.objects.get(pk=n.pk).price, Decimal("12.50"))
        self.assertEqual(list(Tag.objects.get(name="x").note_set.all()), [n])
        self.assertEqual(Note.objects.filter(title__icontains="HELL").count(), 1)
        self.assertIsNotNone(Note.objects.get(pk=n.pk).created)

    def test_rollback_of_a_failed_atomic_block(self):
        Tag.objects.create(name="dup")
        try:
            with transaction.atomic():
                Tag.objects.create(name="other")
                Tag.objects.create(name="dup")
        except IntegrityError:
            pass
        self.assertEqual(sorted(Tag.objects.values_list("name", flat=True)), ["dup"])
