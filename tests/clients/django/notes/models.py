"""The test app: notes with tags, an author, a price and a creation time."""

from django.db import models

class Tag(models.Model):
    name = models.CharField(max_length=30, unique=True)

class Note(models.Model):
    title = models.CharField(max_length=100)
    body = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    price = models.DecimalField(max_digits=8, decimal_places=2, default=0)
    tags = models.ManyToManyField(Tag, blank=True)
    author = models.ForeignKey('auth.User', on_delete=models.CASCADE, null=True)

class Label(models.Model):
    """Made by 0002 with a unique code and a foreign key to the user; 0003 drops the unique
    constraint and points the foreign key at a note (the shim's ALTER TABLE and its
    information_schema, as Django's schema editor reads and changes them)."""
    code = models.CharField(max_length=20)
    owner = models.ForeignKey(Note, on_delete=models.CASCADE, null=True)
